"""Emit numeric functions (numpy, mpmath, torch) from sympy expressions.

One emitter serves every closed form. Scalar parts go through sympy's own printers
(``SciPyPrinter``, ``MpmathPrinter``, ``TorchPrinter``); matrix-expression nodes
(``MatMul``, ``Trace``, ``Inverse``, ``Identity`` of symbolic size, Kronecker products,
``vec``) are printed as calls into a small linear-algebra namespace ``_la`` that each
backend provides. sympy's stock printers do not handle symbolic-size identities or
print some of these nodes wrongly, hence the mixin. In numpy, ``exp`` of an
``UnevaluatedExpr`` (how a stable rewrite marks an exponential that may overflow to inf on
purpose, e.g. ``1/(1 + e^z)`` at large ``z``) is evaluated without the overflow warning.

Functions are produced by :func:`emit` and cached by the caller
(:class:`theory.registry.ClosedForm` keeps one per backend, and :mod:`theory.cache` stores the
generated code on disk), never re-derived per call. Importing this module does not import
sympy (the printers are built on the first :func:`emit`), so that a function loaded from the
cache gets its ``_la`` namespace without it.
"""

from __future__ import annotations

import math
from functools import cache
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    import sympy as sp

__all__ = ["emit", "BACKENDS"]

BACKENDS = ("numpy", "mpmath", "torch")


class _MatrixOps:
    """Printer mixin: matrix-expression nodes become calls into ``_la``."""

    def _print_MatMul(self, expr):
        import sympy as sp

        scalars = [a for a in expr.args if not getattr(a, "is_Matrix", False)]
        mats = [a for a in expr.args if getattr(a, "is_Matrix", False)]
        code = self._print(mats[0])
        for m in mats[1:]:
            code = f"_la.mm({code}, {self._print(m)})"
        if scalars:
            code = f"({self._print(sp.Mul(*scalars))})*{code}"
        return code

    def _print_MatAdd(self, expr):
        return "(" + " + ".join(self._print(a) for a in expr.args) + ")"

    def _print_MatPow(self, expr):
        base, exp = expr.args
        return f"_la.mpow({self._print(base)}, {int(exp)})"

    def _print_Inverse(self, expr):
        return f"_la.inv({self._print(expr.arg)})"

    def _print_Transpose(self, expr):
        return f"_la.T({self._print(expr.arg)})"

    def _print_Trace(self, expr):
        return f"_la.tr({self._print(expr.arg)})"

    def _print_Identity(self, expr):
        return f"_la.eye({self._print(expr.rows)})"

    def _print_ZeroMatrix(self, expr):
        return f"_la.zeros({self._print(expr.rows)}, {self._print(expr.cols)})"

    def _print_KroneckerProduct(self, expr):
        code = self._print(expr.args[0])
        for m in expr.args[1:]:
            code = f"_la.kron({code}, {self._print(m)})"
        return code

    def _print_Vec(self, expr):
        return f"_la.vec({self._print(expr.arg)})"

    def _print_MatrixSymbol(self, expr):
        import sympy as sp

        return self._print(sp.Symbol(expr.name))


class _NumpyLA:
    """Linear algebra for the numpy backend (float64 arrays), and ``exp_to_inf``."""

    @staticmethod
    def exp_to_inf(x):
        """np.exp where overflow to inf is intended (see the numpy printer's ``_print_exp``)."""
        import numpy as np

        with np.errstate(over="ignore"):
            return np.exp(x)

    @staticmethod
    def mm(a, b):
        import numpy as np

        return np.matmul(a, b)

    @staticmethod
    def mpow(a, k):
        import numpy as np

        return np.linalg.matrix_power(a, k)

    @staticmethod
    def inv(a):
        import numpy as np

        return np.linalg.inv(a)

    @staticmethod
    def T(a):
        import numpy as np

        return np.swapaxes(a, -1, -2)

    @staticmethod
    def tr(a):
        import numpy as np

        return np.trace(a, axis1=-2, axis2=-1)

    @staticmethod
    def eye(n):
        import numpy as np

        return np.eye(int(n))

    @staticmethod
    def zeros(n, m):
        import numpy as np

        return np.zeros((int(n), int(m)))

    @staticmethod
    def kron(a, b):
        import numpy as np

        return np.kron(a, b)

    @staticmethod
    def vec(a):
        import numpy as np

        return np.reshape(a, (-1, 1), order="F")


class _NumpyStackLA(_NumpyLA):
    """:class:`_NumpyLA` for stacks of matrices ``(S, D, D)`` (:func:`over_stacks`): a trace keeps
    two unit axes, ``(S, 1, 1)``, so that a scalar computed from a stack multiplies the matching
    matrix of another (a plain ``(S,)`` would broadcast against the matrix's last axis); Kronecker
    products and ``vec`` act per matrix."""

    @staticmethod
    def tr(a):
        import numpy as np

        return np.trace(a, axis1=-2, axis2=-1)[..., None, None]

    @staticmethod
    def kron(a, b):
        import numpy as np

        a, b = np.asarray(a), np.asarray(b)
        out = a[..., :, None, :, None] * b[..., None, :, None, :]
        return out.reshape(out.shape[:-4] + (a.shape[-2] * b.shape[-2], a.shape[-1] * b.shape[-1]))

    @staticmethod
    def vec(a):
        import numpy as np

        a = np.asarray(a)
        return np.swapaxes(a, -1, -2).reshape(a.shape[:-2] + (-1, 1))


def over_stacks(fn: Callable) -> Callable:
    """The numpy function ``fn`` (from :func:`emit`) with the stack-aware ``_la`` (:class:`_NumpyStackLA`):
    the same code, evaluated on stacks of matrices along a leading axis. Not every expression is
    stack-safe (an index into a matrix, a derived value built per matrix); the caller checks items
    against single evaluations."""
    import types

    return types.FunctionType(fn.__code__, {**fn.__globals__, "_la": _NumpyStackLA}, fn.__name__,
                              fn.__defaults__, fn.__closure__)


class _MpmathLA:
    """Linear algebra for the mpmath backend (``mpmath.matrix`` at the working precision)."""

    @staticmethod
    def mm(a, b):
        return a * b

    @staticmethod
    def mpow(a, k):
        return a**k

    @staticmethod
    def inv(a):
        import mpmath

        return mpmath.inverse(a)

    @staticmethod
    def T(a):
        return a.T

    @staticmethod
    def tr(a):
        import mpmath

        return mpmath.fsum(a[i, i] for i in range(a.rows))

    @staticmethod
    def eye(n):
        import mpmath

        return mpmath.eye(int(n))

    @staticmethod
    def zeros(n, m):
        import mpmath

        return mpmath.zeros(int(n), int(m))

    @staticmethod
    def kron(a, b):
        import mpmath

        out = mpmath.zeros(a.rows * b.rows, a.cols * b.cols)
        for i in range(a.rows):
            for j in range(a.cols):
                for k in range(b.rows):
                    for l in range(b.cols):
                        out[i * b.rows + k, j * b.cols + l] = a[i, j] * b[k, l]
        return out

    @staticmethod
    def vec(a):
        import mpmath

        out = mpmath.zeros(a.rows * a.cols, 1)
        for j in range(a.cols):
            for i in range(a.rows):
                out[j * a.rows + i, 0] = a[i, j]
        return out


class _TorchLA:
    """Linear algebra for the torch backend (float64 tensors, autograd-friendly)."""

    @staticmethod
    def mm(a, b):
        import torch

        return torch.matmul(a, b)

    @staticmethod
    def mpow(a, k):
        import torch

        return torch.linalg.matrix_power(a, k)

    @staticmethod
    def inv(a):
        import torch

        return torch.linalg.inv(a)

    @staticmethod
    def T(a):
        return a.transpose(-1, -2)

    @staticmethod
    def tr(a):
        return a.diagonal(dim1=-2, dim2=-1).sum(-1)

    @staticmethod
    def eye(n):
        import torch

        return torch.eye(int(n), dtype=torch.float64)

    @staticmethod
    def zeros(n, m):
        import torch

        return torch.zeros(int(n), int(m), dtype=torch.float64)

    @staticmethod
    def kron(a, b):
        import torch

        return torch.kron(a, b)

    @staticmethod
    def vec(a):
        return a.transpose(-1, -2).reshape(-1, 1)


@cache
def _printers() -> dict:
    """The printer class of each backend (built on first use: they subclass sympy's printers)."""
    import sympy as sp
    from sympy.printing.numpy import SciPyPrinter
    from sympy.printing.pycode import MpmathPrinter
    from sympy.printing.pytorch import TorchPrinter

    class _NumpyPrinter(_MatrixOps, SciPyPrinter):
        def _print_exp(self, expr):
            # exp of an UnevaluatedExpr: a stable rewrite's deliberate exponential whose overflow
            # to inf gives the right limit (e.g. 1/(1 + e^z) -> 0); evaluated without the warning
            if isinstance(expr.args[0], sp.UnevaluatedExpr):
                return f"_la.exp_to_inf({self._print(expr.args[0])})"
            return super()._print_exp(expr)


    class _MpmathPrinter(_MatrixOps, MpmathPrinter):
        def _print_expm1(self, expr):
            return f"mpmath.expm1({self._print(expr.args[0])})"

        def _print_log1p(self, expr):
            return f"mpmath.log1p({self._print(expr.args[0])})"

        def _print_polygamma(self, expr):
            n, x = expr.args
            return f"mpmath.polygamma({self._print(n)}, {self._print(x)})"


    class _TorchPrinter(_MatrixOps, TorchPrinter):
        def _print_expm1(self, expr):
            return f"torch.expm1({self._print(expr.args[0])})"

        def _print_log1p(self, expr):
            return f"torch.log1p({self._print(expr.args[0])})"

        def _print_polygamma(self, expr):
            n, x = expr.args
            return f"torch.special.polygamma({self._print(n)}, {self._print(x)})"

    printers = {"numpy": _NumpyPrinter, "mpmath": _MpmathPrinter, "torch": _TorchPrinter}
    for cls in printers.values():  # named like module-level classes in messages
        cls.__qualname__ = cls.__name__
    return printers


_MODULES = {
    "numpy": lambda: [{"_la": _NumpyLA}, "scipy", "numpy"],
    "mpmath": lambda: [{"_la": _MpmathLA, "mpmath": __import__("mpmath")}, "mpmath"],
    "torch": lambda: [{"_la": _TorchLA, "math": math}, "torch"],
}


def emit(expr: sp.Basic, args: Sequence[sp.Basic], backend: str) -> Callable:
    """Lambdify ``expr`` over ``args`` for one backend.

    Parameters
    ----------
    expr : sympy expression
        Scalar or matrix expression (``MatrixSymbol`` arguments become arrays).
    args : sequence of sympy symbols / matrix symbols
        Positional arguments of the emitted function, in order.
    backend : {"numpy", "mpmath", "torch"}

    Returns
    -------
    callable
        The emitted function; ``inspect.getsource`` shows its code.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    import sympy as sp

    plain = [sp.Symbol(a.name) if isinstance(a, sp.MatrixSymbol) else a for a in args]
    # H_n = digamma(n + 1) + Euler's gamma: no printer handles harmonic correctly
    expr = expr.replace(sp.harmonic, lambda n: sp.polygamma(0, n + 1) + sp.EulerGamma)
    if backend == "torch":  # torch functions take tensors: numeric constants like sqrt(3) become floats
        expr = expr.replace(lambda x: x.is_number and isinstance(x, (sp.Pow, sp.Function)) and not x.is_Rational,
                            lambda x: sp.Float(x.evalf(20), 20))
    printer = _printers()[backend]()
    return sp.lambdify(plain, expr, modules=_MODULES[backend](), printer=printer, cse=True,
                       docstring_limit=0)
