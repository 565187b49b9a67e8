"""What a worker of a local Dask cluster imports before its first task.

:func:`verify.execute.execute` with ``workers=N`` starts its worker processes from one
``multiprocessing`` fork server that has imported this module: the libraries the checks use (numpy,
scipy, sympy, mpmath, torch, matplotlib) and every registered check are then imported once, in the
fork server, rather than once per worker inside its first tasks. Each library is optional (an extra
that is not installed, or fails to import, is skipped, so that the fork server always starts), and
nothing here starts a thread: torch and BLAS read their thread counts from the environment the fork
server was started with (the worker's).
"""

from __future__ import annotations

import importlib

#: Modules imported when present, in this order.
#: ``torch._dynamo``: the first ``torch.optim`` optimiser of a process imports it (about 1.4 s), which every
#: worker would otherwise do in its first training check. (Not pandas: only the client reads the results
#: store into a table; its import took 0.4 s of the fork server's 6-7 s, which the workers wait for.)
MODULES = ("numpy", "scipy.integrate", "scipy.optimize", "scipy.special", "scipy.stats", "sympy", "mpmath",
           "torch", "torch._dynamo", "matplotlib.figure", "matplotlib.backends.backend_agg",
           "matplotlib.backends.backend_svg")


def _import_all() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  not installed, or broken: a task that needs it says so
            pass
    from . import execute, report  # noqa: F401  (a task's code and its figures)
    from .registry import all_checks

    try:
        all_checks()  # every check module, plug-ins included
    except Exception:  # noqa: BLE001  a plug-in that fails to load fails in its task, not in the fork server
        pass


_import_all()
