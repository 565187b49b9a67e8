"""One validation vocabulary for the models, samplers and flows of :mod:`verify`.

Every function checks one argument and returns it normalised; bad input raises ``ValueError``
whose message starts with the argument's name (as :mod:`theory.params` does for the closed
forms), so that a command line can print it as one line.
"""

from __future__ import annotations

import numpy as np

__all__ = ["integer", "positive", "nonnegative", "real_array", "generator", "rng", "covariance", "times"]


def integer(name: str, value, low: int = 1) -> int:
    """An integer ``>= low`` (Python or numpy; not a bool, not a float)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
    if int(value) < low:
        raise ValueError(f"{name}: expected an integer >= {low}, got {value}")
    return int(value)


def rng(value) -> np.random.Generator:
    """A ``numpy.random.Generator`` (the source of every random draw of a sampler)."""
    if not isinstance(value, np.random.Generator):
        raise ValueError(f"rng: expected a numpy.random.Generator, got {type(value).__name__}")
    return value


def _real(name: str, value, what: str) -> float:
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{name}: expected a real number {what}, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a real number {what}, got {value!r}") from None


def positive(name: str, value) -> float:
    """A finite real number ``> 0``, as a float."""
    x = _real(name, value, "> 0")
    if not np.isfinite(x) or x <= 0:
        raise ValueError(f"{name}: must be a finite number > 0, got {value!r}")
    return x


def nonnegative(name: str, value) -> float:
    """A finite real number ``>= 0``, as a float."""
    x = _real(name, value, ">= 0")
    if not np.isfinite(x) or x < 0:
        raise ValueError(f"{name}: must be a finite number >= 0, got {value!r}")
    return x


def probability(name: str, value) -> float:
    """A real number in ``[0, 1]``, as a float."""
    x = _real(name, value, "in [0, 1]")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"{name}: must be a number in [0, 1], got {value!r}")
    return x


def real_array(name: str, value, ndim: int | tuple[int, ...]) -> np.ndarray:
    """A float64 array of finite numbers with ``ndim`` dimensions (an int, or a tuple of allowed
    ones); a torch tensor is detached and copied to the CPU first."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected real numbers, got {type(value).__name__}") from None
    ndims = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if arr.ndim not in ndims:
        raise ValueError(f"{name}: expected {' or '.join(map(str, ndims))} dimensions, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinity")
    return arr


def generator(value):
    """A ``torch.Generator`` (the source of every random draw of a torch model)."""
    import torch

    if not isinstance(value, torch.Generator):
        raise ValueError(f"generator: expected a torch.Generator, got {type(value).__name__}")
    return value


def covariance(name: str, value) -> np.ndarray:
    """A float64 (D, D) symmetric positive-definite array (a list of eigenvalues means the diagonal
    matrix): the rules of the closed forms' ``covariance`` parameters (:mod:`theory.params`)."""
    from theory.params import covariance as param

    return param(name, "covariance").validate(value, {})


def times(name: str, value) -> np.ndarray:
    """Output times of an integration: a non-empty 1-d array of finite, nonnegative,
    non-decreasing numbers."""
    try:
        t = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        t = np.empty((0, 0))
    if t.ndim != 1 or t.size == 0 or not np.all(np.isfinite(t)):
        raise ValueError(f"{name}: expected a non-empty 1-D array of finite times")
    if t[0] < 0 or np.any(np.diff(t) < 0):
        raise ValueError(f"{name}: times must be >= 0 and non-decreasing")
    return t
