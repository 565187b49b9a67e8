"""Typed parameters of closed forms, and their validation.

Every closed form declares its parameters as :class:`Param` objects. A value passed
by a user is checked and normalised by :meth:`Param.validate`; bad input raises
``ValueError`` whose message starts with the parameter's name, so the command line
can print it as one line.

Kinds
-----
``covariance``
    A D x D symmetric positive-definite matrix, or a list of D positive eigenvalues
    meaning the diagonal matrix. Normalised to a float64 ``(D, D)`` array; it fixes D.
``matrix``
    A real D x D matrix (D fixed by a covariance parameter).
``index``
    An integer >= ``low`` (e.g. a context length N >= 1). Integral floats such as
    ``1e9`` are accepted.
``positive``
    A real scalar (or array, for vectorised evaluation) > 0.
``nonnegative``
    A real scalar (or array) >= 0.
``real``
    A finite real scalar (or array) of either sign.
``vector``
    A real vector of length D (D fixed by a covariance or matrix parameter, or by this one).
    Normalised to a float64 ``(D, 1)`` column, matching a ``D x 1`` MatrixSymbol.
``subset``
    A list of distinct 1-based indices into the eigenvalues of the covariance in descending
    order (e.g. ``[1, 3]``); may be empty; each index <= D.
``steps``
    A list of between 1 and ``high`` finite real numbers (e.g. the step sizes
    ``a_0, ..., a_{L-1}`` of L preconditioned-GD layers). Normalised to a tuple of floats;
    the closed form sees it zero-padded to length ``high`` through its ``derived`` values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Param", "covariance", "matrix", "index", "positive", "nonnegative", "real", "subset", "steps", "vector"]

_SYMMETRY_RTOL = 1e-10


@dataclass(frozen=True)
class Param:
    """One parameter of a closed form.

    Attributes
    ----------
    name : str
        The keyword name (``Lambda``, ``N``, ``t`` ...).
    kind : str
        One of ``covariance``, ``matrix``, ``index``, ``positive``, ``nonnegative``.
    doc : str
        One line: what the parameter means.
    low : int
        Smallest allowed value of an ``index`` parameter.
    high : int or None
        Largest allowed value of an ``index`` parameter, or the largest length of a
        ``steps`` list (required for ``steps``).
    symbol : str or None
        Name in :func:`theory.symbols.sym` of the sympy symbol standing for this parameter,
        where it differs from ``name`` (e.g. Scan and Snap's vocabulary size ``M``, a scalar,
        is ``sym("M_vocab")`` because ``M`` is the effective matrix elsewhere).
    """

    name: str
    kind: str
    doc: str
    low: int = 1
    high: int | None = None
    symbol: str | None = None

    def __post_init__(self):
        if self.kind not in _VALIDATORS:
            raise ValueError(f"kind: unknown parameter kind {self.kind!r}")
        if self.kind == "steps" and (self.high is None or self.high < 1):
            raise ValueError(f"high: a steps parameter ({self.name}) needs a maximum length >= 1")

    def validate(self, value: Any, dims: dict[str, int]) -> Any:
        """Check ``value`` and return it normalised (see the module docstring).

        ``dims`` carries dimensions fixed by earlier parameters (``D``); a covariance
        parameter records its dimension there.
        """
        check = _VALIDATORS[self.kind]
        return check(self, value, dims)

    def describe(self) -> str:
        what = {
            "covariance": "D x D symmetric positive-definite matrix, or list of D positive eigenvalues",
            "matrix": "D x D real matrix",
            "index": f"integer >= {self.low}" + (f" and <= {self.high}" if self.high is not None else ""),
            "positive": "real > 0",
            "nonnegative": "real >= 0",
            "real": "finite real number",
            "vector": "real vector of length D",
            "subset": "list of distinct 1-based eigen-direction indices (descending eigenvalues)",
            "steps": f"list of 1 to {self.high} real numbers",
        }[self.kind]
        return f"{self.name}: {what}. {self.doc}"


def _fail(p: Param, msg: str) -> ValueError:
    return ValueError(f"{p.name}: {msg}")


def _as_float_array(p: Param, value: Any) -> np.ndarray:
    if isinstance(value, bool):
        raise _fail(p, "expected a number, got a boolean")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise _fail(p, f"expected real numbers, got {value!r}") from None
    if not np.all(np.isfinite(arr)):
        raise _fail(p, "contains NaN or infinity")
    return arr


def _covariance(p: Param, value: Any, dims: dict[str, int]) -> np.ndarray:
    if _is_torch(value):
        value = value.detach().cpu().numpy()
    arr = _as_float_array(p, value)
    if arr.ndim == 1:
        if arr.size == 0:
            raise _fail(p, "needs at least one eigenvalue")
        if np.any(arr <= 0):
            raise _fail(p, f"eigenvalues must be positive, got {arr.tolist()}")
        arr = np.diag(arr)
    elif arr.ndim == 2:
        if arr.shape[0] != arr.shape[1] or arr.shape[0] == 0:
            raise _fail(p, f"expected a square D x D matrix, got shape {arr.shape}")
        scale = max(np.max(np.abs(arr)), np.finfo(float).tiny)
        if np.max(np.abs(arr - arr.T)) > _SYMMETRY_RTOL * scale:
            raise _fail(p, "matrix is not symmetric")
        arr = 0.5 * (arr + arr.T)
        if np.linalg.eigvalsh(arr)[0] <= 0:
            raise _fail(p, "matrix is not positive definite")
    else:
        raise _fail(p, f"expected a matrix or a list of eigenvalues, got {arr.ndim} dimensions")
    _fix_dim(p, arr.shape[0], dims)
    return arr


def _matrix(p: Param, value: Any, dims: dict[str, int]) -> np.ndarray:
    if _is_torch(value):
        value = value.detach().cpu().numpy()
    arr = _as_float_array(p, value)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise _fail(p, f"expected a square matrix, got shape {arr.shape}")
    _fix_dim(p, arr.shape[0], dims)
    return arr


def _fix_dim(p: Param, d: int, dims: dict[str, int]) -> None:
    if "D" in dims and dims["D"] != d:
        raise _fail(p, f"dimension {d} does not match D = {dims['D']} set by {dims['_by']}")
    dims.setdefault("D", d)
    dims.setdefault("_by", p.name)


def _index(p: Param, value: Any, dims: dict[str, int]) -> int:
    if isinstance(value, bool):
        raise _fail(p, "expected an integer, got a boolean")
    if isinstance(value, (int, np.integer)):
        n = int(value)
    else:
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise _fail(p, f"expected an integer, got {value!r}") from None
        if not math.isfinite(x) or x != math.floor(x):
            raise _fail(p, f"expected an integer, got {value!r}")
        n = int(x)
    if n < p.low:
        raise _fail(p, f"must be >= {p.low}, got {n}")
    if p.high is not None and n > p.high:
        raise _fail(p, f"must be <= {p.high}, got {n}")
    return n


def _scalar(p: Param, value: Any, strict: bool):
    if _is_torch(value):
        arr = _as_float_array(p, value.detach().cpu().numpy())
        out = value
    else:
        arr = _as_float_array(p, value)
        out = float(arr) if arr.ndim == 0 else arr
    bad = arr <= 0 if strict else arr < 0
    if np.any(bad):
        raise _fail(p, f"must be {'> 0' if strict else '>= 0'}, got {value!r}")
    return out


def _real(p: Param, value: Any):
    if _is_torch(value):
        _as_float_array(p, value.detach().cpu().numpy())
        return value
    arr = _as_float_array(p, value)
    return float(arr) if arr.ndim == 0 else arr


def _vector(p: Param, value: Any, dims: dict[str, int]) -> np.ndarray:
    if _is_torch(value):
        value = value.detach().cpu().numpy()
    arr = _as_float_array(p, value)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1 or arr.size == 0:
        raise _fail(p, f"expected a vector of length D, got shape {arr.shape}")
    _fix_dim(p, arr.size, dims)
    return arr.reshape(-1, 1)


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch")


def _subset(p: Param, value: Any, dims: dict[str, int]) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise _fail(p, f"expected a list of indices, got {value!r}")
    out = []
    for x in value:
        out.append(_index(Param(p.name, "index", p.doc, low=1), x, dims))
    if len(set(out)) != len(out):
        raise _fail(p, f"indices must be distinct, got {list(value)!r}")
    if "D" in dims and out and max(out) > dims["D"]:
        raise _fail(p, f"index {max(out)} exceeds D = {dims['D']}")
    return tuple(sorted(out))


def _steps(p: Param, value: Any, dims: dict[str, int]) -> tuple[float, ...]:
    if _is_torch(value):
        value = value.detach().cpu().numpy()
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise _fail(p, f"expected a list of 1 to {p.high} numbers, got {value!r}")
    arr = _as_float_array(p, value)
    if arr.ndim != 1 or not 1 <= arr.size <= p.high:
        raise _fail(p, f"expected a list of 1 to {p.high} numbers, got {value!r}")
    return tuple(float(x) for x in arr)


_VALIDATORS = {
    "covariance": _covariance,
    "matrix": _matrix,
    "index": _index,
    "positive": lambda p, v, d: _scalar(p, v, strict=True),
    "nonnegative": lambda p, v, d: _scalar(p, v, strict=False),
    "real": lambda p, v, d: _real(p, v),
    "vector": _vector,
    "subset": _subset,
    "steps": _steps,
}


def covariance(name: str, doc: str) -> Param:
    return Param(name, "covariance", doc)


def matrix(name: str, doc: str) -> Param:
    return Param(name, "matrix", doc)


def index(name: str, doc: str, low: int = 1, high: int | None = None) -> Param:
    return Param(name, "index", doc, low=low, high=high)


def positive(name: str, doc: str) -> Param:
    return Param(name, "positive", doc)


def nonnegative(name: str, doc: str) -> Param:
    return Param(name, "nonnegative", doc)


def real(name: str, doc: str) -> Param:
    return Param(name, "real", doc)


def vector(name: str, doc: str) -> Param:
    return Param(name, "vector", doc)


def subset(name: str, doc: str) -> Param:
    return Param(name, "subset", doc)


def steps(name: str, doc: str, high: int) -> Param:
    return Param(name, "steps", doc, high=high)
