"""Elementary functions in each numeric backend, for records evaluated by hand-written code.

Most records are emitted from sympy (:mod:`theory.emit`); a record defined by a recursion or an
implicit equation evaluates itself (``ClosedForm.evaluate``) and needs ``exp``, ``log``,
``log1p`` and a conversion to the backend's number type in numpy, mpmath or torch::

    ops = backend_ops("mpmath")
    ops.log1p(1 / ops.number(M - 1))

``number`` gives an ``mpmath.mpf`` at the working precision (mpmath), a float64 tensor (torch;
a tensor input keeps its autograd graph) or the value itself (numpy). The torch functions accept
plain numbers as well as tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Callable

__all__ = ["BackendOps", "backend_ops", "working", "BACKENDS"]

#: The numeric backends of every record.
BACKENDS = ("numpy", "mpmath", "torch")


@dataclass(frozen=True)
class BackendOps:
    """``exp``, ``log``, ``log1p`` and ``number`` (conversion to the backend's number type)."""

    name: str
    exp: Callable
    log: Callable
    log1p: Callable
    number: Callable


@cache
def backend_ops(backend: str) -> BackendOps:
    """The :class:`BackendOps` of ``backend`` (``numpy``, ``mpmath`` or ``torch``); ``ValueError``
    naming ``backend`` for anything else."""
    if backend == "numpy":
        import numpy as np

        return BackendOps("numpy", np.exp, np.log, np.log1p, lambda x: x)
    if backend == "mpmath":
        import mpmath

        return BackendOps("mpmath", mpmath.exp, mpmath.log, mpmath.log1p, mpmath.mpf)
    if backend == "torch":
        import torch

        def number(x):
            return x.to(torch.float64) if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=torch.float64)

        return BackendOps("torch", lambda x: torch.exp(number(x)), lambda x: torch.log(number(x)),
                          lambda x: torch.log1p(number(x)), number)
    raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")


def working(backend: str, x):
    """``x`` as an ``mpmath.mpf`` at the working precision under mpmath (so that what follows is
    computed at ``mp.dps`` digits, not in float64); unchanged under numpy and torch."""
    return backend_ops("mpmath").number(x) if backend == "mpmath" else x
