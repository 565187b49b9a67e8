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
    An integer ``low <= n <= high`` (e.g. a context length N >= 1). Integral floats such as
    ``1e9`` are accepted; normalised to a Python ``int``. ``high`` defaults to
    :data:`INDEX_MAX` ``= 2**53``: every index is a count (a context length, a dimension, a
    vocabulary size, a position), the numeric backends compute in float64, and beyond
    ``2**53`` float64 no longer holds every integer (``2**53 + 1`` is not representable),
    so a larger count could not be honoured; it is refused with ``ValueError`` naming the
    parameter (also JSON ``1e30``, ``2**64`` or ``10**400``, which numpy cannot even hold as
    a machine integer). The large-count behaviour of the closed forms is covered by their
    limit records (e.g. ``*_limit``) and by values up to the bound.
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

Torch tensors
    A ``torch.Tensor`` given for a ``covariance``, ``matrix``, ``vector`` or scalar parameter is
    checked on a detached float64 copy (same rules, same messages), but what validation returns
    is the tensor itself, so that the torch backend computes with it and autograd flows back to
    it: a covariance given as a 1-d tensor of eigenvalues becomes ``torch.diag_embed`` of it, a
    matrix its symmetric part ``(A + A^T) / 2``, a vector a ``(D, 1)`` view; integer tensors
    become float64, floating ones keep their dtype and device. The numpy and mpmath backends,
    and the ``domain`` checks of a record, see the detached values (:func:`detached_values`).

mpmath backend
    :meth:`Param.validate_exact` (what ``ClosedForm.__call__`` uses with ``backend="mpmath"``) also
    takes ``mpmath.mpf``, ``fractions.Fraction``, ``decimal.Decimal`` and decimal strings
    (``"0.1"``, ``"1e-30"``, ``"1/3"``), alone or as entries of (nested) lists, and an
    ``mpmath.matrix``: each is read as the rational number it denotes and rounded once to the
    working precision, so no value passes through float64. The checks (positivity, symmetry and
    positive-definiteness, integer indices, a record's ``domain``) are decided on a float64 copy;
    an integral value stays an exact Python ``int`` there (an index may be given as ``"12"`` or
    ``Fraction(12)``).

Refused for every kind, naming the parameter: values that are not real numbers (booleans,
also inside lists, where numpy would read ``True`` as 1.0; strings, also numeric ones such as
``"5"``; ``None``, which numpy would read as NaN; dicts, i.e. JSON objects; dates; complex
numbers), NaN and infinity, ragged nested lists, and numbers beyond float64 (``10**400``).
A scalar parameter (``positive``, ``nonnegative``, ``real``) takes an array for vectorised
evaluation, but not an empty one (``[]``, ``[[]]``); the arrays of one call must broadcast
together (checked by :meth:`theory.registry.ClosedForm.validate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["Param", "covariance", "matrix", "index", "positive", "nonnegative", "real", "subset", "steps", "vector",
           "validate_stack"]

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
        Largest allowed value of an ``index`` parameter (None: :data:`INDEX_MAX` = 2**53), or
        the largest length of a ``steps`` list (required for ``steps``).
    sample : tuple or None
        Where the high-precision check draws this parameter at random: ``(low, high)``
        (uniform; for an ``index``, integers ``low..high``, where ``high`` may be ``"D"``, the
        dimension of the matrices drawn with it) or ``(low, high, "log")`` (log-uniform).
        ``None``: the range of the kind (:data:`SAMPLE_RANGES`). An ``index`` range is clipped
        to the parameter's ``low``/``high``.
    example_value : any
        A typical valid value (what ``python -m theory show`` evaluates the record at); ``None``
        for the default of the kind (:meth:`example`).
    """

    name: str
    kind: str
    doc: str
    low: int = 1
    high: int | None = None
    sample: tuple | None = None
    example_value: Any = None

    def __post_init__(self):
        if self.kind not in _VALIDATORS:
            raise ValueError(f"kind: unknown parameter kind {self.kind!r}")
        if self.kind == "steps" and (self.high is None or self.high < 1):
            raise ValueError(f"high: a steps parameter ({self.name}) needs a maximum length >= 1")
        if self.sample is not None:
            s = self.sample
            ok = (isinstance(s, tuple) and len(s) in (2, 3) and _is_number(s[0])
                  and (_is_number(s[1]) and s[0] <= s[1] or s[1] == "D" and self.kind == "index")
                  and (len(s) == 2 or s[2] == "log" and s[0] > 0))
            if not ok:
                raise ValueError(f"sample: expected (low, high) or (low > 0, high, 'log') for {self.name}, "
                                 f"got {self.sample!r}")

    def validate(self, value: Any, dims: dict[str, int]) -> Any:
        """Check ``value`` and return it normalised (see the module docstring).

        ``dims`` carries dimensions fixed by earlier parameters (``D``); a covariance
        parameter records its dimension there.
        """
        check = _VALIDATORS[self.kind]
        return check(self, value, dims)

    def validate_exact(self, value: Any, dims: dict[str, int]) -> tuple[Any, Any]:
        """:meth:`validate` for the mpmath backend: ``(checked, exact)``. ``checked`` is what
        :meth:`validate` returns for a float64 copy of ``value`` (decimal strings, ``Fraction``,
        ``Decimal`` and ``mpmath.mpf`` entries read as the nearest float, integers kept), on which
        every check is decided; ``exact`` is ``value`` itself at the working precision
        (``mpmath.mp.prec``), normalised the same way (module docstring, "mpmath backend")."""
        checked = self.validate(_checked_copy(self, value), dims)
        return checked, _mp_exact(self, value, checked)

    def describe(self) -> str:
        what = {
            "covariance": "D x D symmetric positive-definite matrix, or list of D positive eigenvalues",
            "matrix": "D x D real matrix",
            "index": f"integer >= {self.low} and <= "
                     + (str(self.high) if self.high is not None else "2**53"),
            "positive": "real > 0",
            "nonnegative": "real >= 0",
            "real": "finite real number",
            "vector": "real vector of length D",
            "subset": "list of distinct 1-based eigen-direction indices (descending eigenvalues)",
            "steps": f"list of 1 to {self.high} real numbers",
        }[self.kind]
        return f"{self.name}: {what}. {self.doc}"

    def example(self) -> Any:
        """:attr:`example_value`, else a value valid for this parameter on its own (dimension 3
        where it has one); a record's domain may still refuse the combination."""
        if self.example_value is not None:
            import copy

            return copy.deepcopy(self.example_value)
        return {
            "covariance": [1.0, 0.5, 0.25],
            "matrix": [[1.1, 0.1, 0.1], [0.1, 1.1, 0.1], [0.1, 0.1, 1.1]],
            "vector": [0.1, -0.2, 0.3],
            "index": max(self.low, 1),
            "positive": 0.5,
            "nonnegative": 0.5,
            "real": -0.5,
            "subset": [1],
            "steps": [0.5],
        }[self.kind]


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _fail(p: Param, msg: str) -> ValueError:
    return ValueError(f"{p.name}: {msg}")


#: Default upper bound of an ``index`` parameter: the largest integer up to which float64
#: represents every integer (the numeric backends compute in float64).
INDEX_MAX = 2**53

#: Where the high-precision check draws a parameter that declares no :attr:`Param.sample`: an
#: ``index`` from its ``low`` up to 1000 (a recursion evaluated step by step in mpmath must stay
#: cheap), a scalar uniformly in [0.2, 3] (a ``real`` parameter that should also be drawn
#: negative declares its own range).
SAMPLE_RANGES = {"index": (0, 1000), "positive": (0.2, 3.0), "nonnegative": (0.2, 3.0), "real": (0.2, 3.0)}

#: numpy dtype kinds that hold real numbers (signed and unsigned integers, floats); object arrays
#: (Python ints beyond int64, Decimal, Fraction) are converted element by element.
_NUMERIC_KINDS = "iuf"


def _type_name(x: Any) -> str:
    """What ``x`` is, in the words of a JSON user where there is one."""
    if isinstance(x, (bool, np.bool_)):
        return "a boolean"
    if isinstance(x, str):
        return "a string"
    if x is None:
        return "null (None)"
    if isinstance(x, dict):
        return "a JSON object (dict)"
    return f"a {type(x).__name__}"


_NOT_A_NUMBER = (bool, np.bool_, str, bytes, dict, set, np.datetime64, np.timedelta64, type(None))


def _bad_element(x: Any) -> tuple[bool, Any]:
    """``(True, entry)`` for the first entry of a (nested) list, tuple or object array that is
    not a real number (a boolean, string, None, dict, set, date ...), else ``(False, None)``.
    numpy would silently turn ``[True, 0.5]`` into ``[1.0, 0.5]`` and ``None`` into NaN."""
    if isinstance(x, _NOT_A_NUMBER):
        return True, x
    if isinstance(x, np.ndarray):
        if x.dtype.kind != "O":
            return False, None
        x = x.ravel().tolist()
    if isinstance(x, (list, tuple)):
        for v in x:
            found, bad = _bad_element(v)
            if found:
                return True, bad
    return False, None


def _as_float_array(p: Param, value: Any) -> np.ndarray:
    """``value`` as a float64 array of finite entries; ``ValueError`` naming ``p`` for anything
    that is not (an array of) real numbers: booleans (also inside lists), strings, None,
    dicts, dates, complex numbers, ragged nested lists, integers beyond float64."""
    found, bad = _bad_element(value)
    if found:
        where = "" if bad is value else "an entry that is "
        raise _fail(p, f"expected real numbers, got {where}{_type_name(bad)}: {_short(bad)}")
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        raise _fail(p, f"expected a rectangular array of real numbers, got {_short(value)}") from None
    if raw.dtype.kind not in _NUMERIC_KINDS + "O":
        raise _fail(p, f"expected real numbers, got {raw.dtype} values: {_short(value)}")
    try:
        arr = np.asarray(raw, dtype=np.float64)
    except OverflowError:
        raise _fail(p, f"too large for float64 (at most about 1.8e308), got {_short(value)}") from None
    except (TypeError, ValueError):
        raise _fail(p, f"expected real numbers, got {_short(value)}") from None
    if not np.all(np.isfinite(arr)):
        raise _fail(p, "contains NaN or infinity")
    return arr


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _covariance(p: Param, value: Any, dims: dict[str, int]) -> np.ndarray:
    if _is_torch(value):
        _covariance(p, _detached(value), dims)
        t = _torch_float(value)
        # the graph is kept: eigenvalues -> diagonal matrix, a matrix -> its symmetric part
        if t.ndim == 1:
            import torch

            return torch.diag_embed(t)
        return 0.5 * (t + t.transpose(-1, -2))
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
        arr = _symmetric_positive_definite(p, arr[None], stacked=False)[0]
    else:
        raise _fail(p, f"expected a matrix or a list of eigenvalues, got {arr.ndim} dimensions")
    _fix_dim(p, arr.shape[0], dims)
    return arr


def _matrix(p: Param, value: Any, dims: dict[str, int]) -> np.ndarray:
    if _is_torch(value):
        _matrix(p, _detached(value), dims)
        return _torch_float(value)
    arr = _as_float_array(p, value)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise _fail(p, f"expected a square matrix, got shape {arr.shape}")
    _fix_dim(p, arr.shape[0], dims)
    return arr


def validate_stack(p: Param, value: Any, dims: dict[str, int]) -> np.ndarray:
    """A stack ``(S, D, D)`` of values of the matrix or covariance parameter ``p``, checked at once
    (real and finite entries, square, the dimension of ``dims``; a covariance symmetric and positive
    definite, symmetrised); ``ValueError`` naming ``p`` and, where one item is at fault, the item."""
    if _is_torch(value):
        raise _fail(p, "a stack of matrices is evaluated by the numpy backend; give a numpy array")
    arr = _as_float_array(p, value)
    if arr.ndim != 3 or arr.shape[1] != arr.shape[2] or arr.shape[1] == 0:
        raise _fail(p, f"expected a stack of square matrices (S, D, D), got shape {arr.shape}")
    _fix_dim(p, arr.shape[1], dims)
    if p.kind == "covariance":
        return _symmetric_positive_definite(p, arr, stacked=True)
    if p.kind != "matrix":
        raise _fail(p, f"a {p.kind} parameter cannot be given as a stack")
    return arr


def _symmetric_positive_definite(p: Param, arr: np.ndarray, stacked: bool) -> np.ndarray:
    """The symmetric parts of the matrices ``arr`` (S, D, D); ``ValueError`` naming ``p`` (and, for a
    stack, the item) where one is not symmetric to :data:`_SYMMETRY_RTOL` or not positive definite."""
    def where(i):
        return f" (item {i} of the stack)" if stacked else ""

    scale = np.maximum(np.max(np.abs(arr), axis=(1, 2)), np.finfo(float).tiny)
    bad = np.nonzero(np.max(np.abs(arr - np.swapaxes(arr, 1, 2)), axis=(1, 2)) > _SYMMETRY_RTOL * scale)[0]
    if bad.size:
        raise _fail(p, f"matrix is not symmetric{where(bad[0])}")
    arr = 0.5 * (arr + np.swapaxes(arr, 1, 2))
    bad = np.nonzero(np.linalg.eigvalsh(arr)[:, 0] <= 0)[0]
    if bad.size:
        raise _fail(p, f"matrix is not positive definite{where(bad[0])}")
    return arr


def _fix_dim(p: Param, d: int, dims: dict[str, int]) -> None:
    if "D" in dims and dims["D"] != d:
        raise _fail(p, f"dimension {d} does not match D = {dims['D']} set by {dims['_by']}")
    dims.setdefault("D", d)
    dims.setdefault("_by", p.name)


def _index(p: Param, value: Any, dims: dict[str, int]) -> int:
    if _is_torch(value) or isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise _fail(p, f"expected an integer, got {_short(value)}")
        value = value.item()
    if isinstance(value, (bool, np.bool_)):
        raise _fail(p, "expected an integer, got a boolean")
    if isinstance(value, _NOT_A_NUMBER + (list, tuple, complex, np.complexfloating)):
        raise _fail(p, f"expected an integer, got {_type_name(value)}: {_short(value)}")
    if isinstance(value, (int, np.integer)):
        n = int(value)
    else:
        try:
            x = float(value)
        except (TypeError, ValueError, OverflowError):
            raise _fail(p, f"expected an integer, got {_short(value)}") from None
        if not math.isfinite(x) or x != math.floor(x):
            raise _fail(p, f"expected an integer, got {_short(value)}")
        n = int(x)
    if n < p.low:
        raise _fail(p, f"must be >= {p.low}, got {_int_str(n)}")
    if p.high is not None and n > p.high:
        raise _fail(p, f"must be <= {p.high}, got {_int_str(n)}")
    if n > INDEX_MAX:
        raise _fail(p, f"must be <= 2**53 = {INDEX_MAX} (a count beyond what float64 holds "
                       f"exactly), got {_int_str(n)}")
    return n


def _int_str(n: int) -> str:
    """An integer for a message: in full up to 20 digits, else rounded (10**400 -> 1.000e+400;
    formatting through float would overflow)."""
    digits = str(abs(n))
    if len(digits) <= 20:
        return str(n)
    return f"{'-' if n < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1}"


#: The plain real scalars validated without numpy (a bool is not among them: ``type(True) is bool``).
_PLAIN_REALS = (float, int, np.float64)


def _plain_real(value: Any) -> float | None:
    """``float(value)`` for a finite plain Python/numpy float or int, else None (the general
    path then validates it and words any error): the common case of a scalar parameter, at a
    tenth of the cost of going through numpy arrays, with the same result."""
    if type(value) in _PLAIN_REALS:
        try:
            x = float(value)
        except OverflowError:
            return None
        if math.isfinite(x):
            return x
    return None


def _real(p: Param, value: Any):
    """A finite number or a non-empty array of them (a torch tensor is kept as it is)."""
    x = _plain_real(value)
    if x is not None:
        return x
    if _is_torch(value):
        arr = _as_float_array(p, _detached(value))
        out = _torch_float(value)
    else:
        arr = _as_float_array(p, value)
        out = float(arr) if arr.ndim == 0 else arr
    if arr.size == 0:
        raise _fail(p, f"expected a number or a non-empty array of numbers, got {_short(value)}")
    return out


def _scalar(p: Param, value: Any, strict: bool):
    """:func:`_real`, and > 0 (``strict``) or >= 0."""
    x = _plain_real(value)
    if x is not None and (x > 0 if strict else x >= 0):
        return x
    out = _real(p, value)
    arr = _as_float_array(p, _detached(out) if _is_torch(out) else out)
    bad = arr <= 0 if strict else arr < 0
    if np.any(bad):
        raise _fail(p, f"must be {'> 0' if strict else '>= 0'}, got {_short(value)}")
    return out


def _vector(p: Param, value: Any, dims: dict[str, int]) -> np.ndarray:
    if _is_torch(value):
        _vector(p, _detached(value), dims)
        return _torch_float(value).reshape(-1, 1)
    arr = _as_float_array(p, value)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1 or arr.size == 0:
        raise _fail(p, f"expected a vector of length D, got shape {arr.shape}")
    _fix_dim(p, arr.size, dims)
    return arr.reshape(-1, 1)


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch")


def _detached(value: Any) -> np.ndarray:
    """A torch tensor's values as a numpy array, cut from the autograd graph (what is checked);
    the tensor itself is what the torch backend computes with."""
    return value.detach().cpu().numpy()


def _torch_float(value: Any) -> Any:
    """A tensor as it enters the torch backend: a floating tensor unchanged (same object, dtype,
    device and autograd graph), an integer one as float64."""
    import torch

    return value if value.is_floating_point() else value.to(torch.float64)


# -- exact values for the mpmath backend -------------------------------------------------------
#: Scalar types the mpmath backend takes exactly (besides ``int`` and ``float``): read as the
#: rational number they denote and rounded once, to the working precision (``mpmath.mp.prec``).
_EXACT_TYPES = (Fraction, Decimal, str)

#: Parameter kinds that take a scalar or, for vectorised numpy evaluation, an array (with the mpmath
#: backend: one ``mpf``).
SCALAR_KINDS = ("positive", "nonnegative", "real")


def _is_exact_scalar(x: Any) -> bool:
    """Whether ``x`` is a scalar given in a type the float64 path would round or refuse (a decimal
    string, ``Fraction``, ``Decimal``, ``mpmath.mpf``); ``int`` and ``float`` are not (exact as
    they are)."""
    return isinstance(x, _EXACT_TYPES) or _is_mpmath(x) and not hasattr(x, "rows")


def _is_mpmath(x: Any) -> bool:
    return type(x).__module__.startswith("mpmath")


def _listed(value: Any) -> Any:
    """An ``mpmath.matrix`` as nested lists of its entries (a column as a flat list); anything
    else unchanged."""
    if _is_mpmath(value) and hasattr(value, "rows"):
        rows = value.tolist()
        return [r[0] for r in rows] if value.cols == 1 else rows
    return value


#: Decimal exponents an exact input may have: beyond float64's largest (about 1e308) it is refused
#: like any number beyond float64; below ``-_MIN_EXP`` it is refused too (reading such a
#: number exactly would build integers of millions of digits).
_MAX_EXP, _MIN_EXP = 400, 100_000


def _rational(p: Param, x: Any) -> Fraction:
    """The rational number ``x`` denotes (``Fraction``, ``Decimal``, ``mpmath.mpf``, a decimal
    string such as ``"0.1"`` or ``"1e-30"``, or ``"1/3"``); ``ValueError`` naming ``p`` for a
    string that is not a number, NaN, infinity, a complex ``mpc``, or a decimal exponent beyond
    float64 (or below -100000)."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, str) and "/" in x:
        try:
            return Fraction(x.strip())
        except (ValueError, ZeroDivisionError):
            pass
    elif isinstance(x, (str, Decimal)):
        try:
            d = Decimal(x.strip()) if isinstance(x, str) else x
        except InvalidOperation:
            d = None
        if d is not None and d.is_finite():
            _in_range(p, x, d.adjusted() if d else 0)
            return Fraction(d)
    else:
        import mpmath

        if isinstance(x, mpmath.mpf) and mpmath.isfinite(x):
            man, exp = x.man_exp
            _in_range(p, x, int(mpmath.mag(x) * 0.30103) if man else 0)  # decimal exponent, roughly
            return Fraction(man) * Fraction(2) ** exp
    if isinstance(x, str):
        raise _fail(p, f"expected real numbers, got a string that is not a decimal number: {_short(x)}")
    raise _fail(p, f"expected finite real numbers, got {_short(x)}")


def _in_range(p: Param, x: Any, exponent: int) -> None:
    """``ValueError`` naming ``p`` where the decimal ``exponent`` of ``x`` is beyond
    :data:`_MAX_EXP` or below ``-``:data:`_MIN_EXP`."""
    if exponent > _MAX_EXP:
        raise _fail(p, f"too large for float64 (at most about 1.8e308), got {_short(x)}")
    if exponent < -_MIN_EXP:
        raise _fail(p, f"too small (a decimal exponent below -{_MIN_EXP}), got {_short(x)}")


def _checked_copy(p: Param, value: Any) -> Any:
    """``value`` with every exactly given scalar (:func:`_is_exact_scalar`) replaced by the copy
    the float64 checks read: an ``int`` where it is an integer below 2**64 (so that an index
    stays exact), else the nearest float (the smallest subnormal, signed, for a nonzero value that
    float64 rounds to zero); ``ValueError`` naming ``p`` beyond float64. Lists,
    tuples and object arrays are copied element by element; anything else is left to the checks."""
    value = _listed(value)
    if _is_exact_scalar(value):
        q = _rational(p, value)
        if q.denominator == 1 and abs(q) < 2**64:
            return int(q)
        try:
            x = float(q)
        except OverflowError:
            raise _fail(p, f"too large for float64 (at most about 1.8e308), got {_short(value)}") from None
        # below float64's smallest subnormal: keep the sign, so that a positivity check holds
        return math.copysign(5e-324, q) if x == 0 and q != 0 else x
    if isinstance(value, np.ndarray) and value.dtype.kind == "O":
        return [_checked_copy(p, v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_checked_copy(p, v) for v in value]
    return value


def _mp_number(p: Param, x: Any):
    """One scalar as an ``mpmath.mpf``, rounded once to the working precision: ``int``, ``float``
    and numpy numbers as they are, the types of :func:`_is_exact_scalar` as the rational number
    they denote (no float64 round trip)."""
    import mpmath
    from mpmath.libmp import from_rational, round_nearest

    if _is_exact_scalar(x):
        q = _rational(p, x)
        return mpmath.mpf(from_rational(q.numerator, q.denominator, mpmath.mp.prec, round_nearest))
    if isinstance(x, (int, np.integer)):
        return mpmath.mpf(int(x))
    return mpmath.mpf(float(x))


def _mp_entries(p: Param, value: Any) -> Any:
    """``value`` (a scalar, a nested list, a numpy array or a torch tensor) as nested lists of
    :func:`_mp_number` entries."""
    value = _listed(value)
    if _is_torch(value):
        value = _detached(value)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_mp_entries(p, v) for v in value]
    return _mp_number(p, value)


def _mp_exact(p: Param, value: Any, checked: Any) -> Any:
    """The mpmath backend's value of parameter ``p``: the input ``value`` at the working precision,
    normalised like ``checked`` (what :meth:`Param.validate` returned for the float64 copy):
    scalars as ``mpmath.mpf``, a covariance as a symmetric ``mpmath.matrix`` (the diagonal
    matrix of a list of eigenvalues, the symmetric part ``(A + A^T)/2`` of a matrix), a matrix
    as an ``mpmath.matrix``, a vector as a ``D x 1`` one, steps as a tuple of ``mpf``; indices
    and subsets as validated (Python integers)."""
    import mpmath

    if p.kind in ("index", "subset"):
        return checked
    entries = _mp_entries(p, value)
    if p.kind == "steps":
        return tuple(entries)
    if p.kind in SCALAR_KINDS:
        return entries
    if p.kind == "vector":
        flat = [e[0] if isinstance(e, list) else e for e in entries]
        return mpmath.matrix(flat)
    if p.kind == "covariance" and not isinstance(entries[0], list):
        return mpmath.diag(entries)
    A = mpmath.matrix(entries)
    return (A + A.T) / 2 if p.kind == "covariance" else A


def detached_values(values: dict) -> dict:
    """``values`` from :meth:`theory.registry.ClosedForm.validate` with every torch tensor replaced
    by what the same input gives as a plain number or list: a float64 numpy array (a Python
    ``float`` for a 0-d tensor). For checks (``domain``) and for the numpy and mpmath backends."""
    out = {}
    for k, v in values.items():
        if _is_torch(v):
            arr = np.asarray(_detached(v), dtype=np.float64)
            v = float(arr) if arr.ndim == 0 else arr
        out[k] = v
    return out


def _subset(p: Param, value: Any, dims: dict[str, int]) -> tuple[int, ...]:
    if _is_torch(value):
        value = _detached(value)
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise _fail(p, f"expected a list of indices, got an array of shape {value.shape}")
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise _fail(p, f"expected a list of indices, got {_type_name(value)}: {_short(value)}")
    items = list(value)
    out = [_index(Param(p.name, "index", p.doc, low=1), x, dims) for x in items]
    if len(set(out)) != len(out):
        raise _fail(p, f"indices must be distinct, got {_short(items)}")
    if "D" in dims and out and max(out) > dims["D"]:
        raise _fail(p, f"index {max(out)} exceeds D = {dims['D']}")
    return tuple(sorted(out))


def _steps(p: Param, value: Any, dims: dict[str, int]) -> tuple[float, ...]:
    if _is_torch(value):
        value = _detached(value)
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


def covariance(name: str, doc: str, *, example=None) -> Param:
    return Param(name, "covariance", doc, example_value=example)


def matrix(name: str, doc: str, *, example=None) -> Param:
    return Param(name, "matrix", doc, example_value=example)


def index(name: str, doc: str, low: int = 1, high: int | None = None, *, example=None, sample=None) -> Param:
    return Param(name, "index", doc, low=low, high=high, example_value=example, sample=sample)


def positive(name: str, doc: str, *, example=None, sample=None) -> Param:
    return Param(name, "positive", doc, example_value=example, sample=sample)


def nonnegative(name: str, doc: str, *, example=None, sample=None) -> Param:
    return Param(name, "nonnegative", doc, example_value=example, sample=sample)


def real(name: str, doc: str, *, example=None, sample=None) -> Param:
    return Param(name, "real", doc, example_value=example, sample=sample)


def vector(name: str, doc: str, *, example=None) -> Param:
    return Param(name, "vector", doc, example_value=example)


def subset(name: str, doc: str, *, example=None) -> Param:
    return Param(name, "subset", doc, example_value=example)


def steps(name: str, doc: str, high: int, *, example=None) -> Param:
    return Param(name, "steps", doc, high=high, example_value=example)
