"""Check modules; importing this package registers every check.

Two sources, both discovered, never listed:

* the modules of this package, recursively (``verify/checks/<module>.py`` and
  ``verify/checks/<topic>/<module>.py``), in name order at each level, so adding a file is all
  it takes;
* installed plug-ins: every entry point of the group ``attention_dynamics_theory.checks``
  (:data:`theory.papers.CHECKS_GROUP`), by name; its value names a module or package whose
  import, with every submodule, registers checks with :func:`verify.check`. A plug-in that
  fails to import raises :class:`theory.papers.PluginError` naming the entry point.
"""

from theory.papers import CHECKS_GROUP, PluginError, describe_entry_point, entry_points
from theory.registry import import_package


def _load_plugins() -> None:
    for ep in entry_points(CHECKS_GROUP):
        try:
            import_package(ep.value.split(":", 1)[0].strip())
        except Exception as exc:
            raise PluginError(f"{describe_entry_point(ep, CHECKS_GROUP)} failed to load: "
                              f"{type(exc).__name__}: {exc}") from exc


import_package(__name__)
_load_plugins()
