"""Check modules, one per topic; importing this package registers every check.

Modules are discovered in name order, so adding a file here is all it takes.
"""

import importlib
import pkgutil

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_info.name}")
