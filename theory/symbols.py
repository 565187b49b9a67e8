"""The shared symbol table: one sympy object per parameter name, used by every topic.

A parameter called ``Lambda`` in any closed form is the MatrixSymbol below, ``N`` is the
positive symbol below, and so on, so that expressions from different papers combine and
compare directly. Created on first use (sympy is imported lazily).
"""

from __future__ import annotations

from functools import cache

__all__ = ["sym", "dim"]


@cache
def dim():
    """The symbolic matrix size D (also the parameter ``D`` where one is declared)."""
    import sympy as sp

    return sp.Symbol("D", integer=True, positive=True)


@cache
def sym(name: str):
    """The sympy object for the parameter ``name``.

    Matrix parameters (``Lambda``, ``Lambda_q``, ``M``, ``A``, ``Sigma``, ``W_Q``, ``W_K``,
    ``W_QK``) and the eigen-projectors (``P``, ``P_prev``, ``E_m``) are D x D MatrixSymbols;
    ``D`` is :func:`dim`; ``N_max``, ``m``, ``n``, ``d``, ``L``, ``R``, ``i``, ``T``, ``s``, ``K``
    are positive integers; ``t`` is nonnegative; the step sizes ``a_0, a_1, ...`` (and ``b_l``,
    ``c_l``), ``xi`` and ``trW`` are real; everything else is a positive real symbol.
    """
    import sympy as sp

    D = dim()
    if name in _MATRICES:
        return sp.MatrixSymbol(name, D, D)
    if name in _VECTORS:
        return sp.MatrixSymbol(name, D, 1)
    if name in _ALIASES:  # a scalar shown under a name that is a matrix elsewhere
        return sp.Symbol(_ALIASES[name], integer=True, positive=True)
    if name == "D":
        return D
    if name in _INTEGERS:
        return sp.Symbol(name, integer=True, positive=True)
    if name in _NONNEGATIVE:
        return sp.Symbol(name, nonnegative=True)
    if name in _REALS:
        return sp.Symbol(name, real=True)
    return sp.Symbol(name, positive=True)


_MATRICES = {"Lambda", "Lambda_q", "M", "A", "Sigma", "P", "P_prev", "E_m", "W_Q", "W_K", "W_QK"}
_INTEGERS = {"N_max", "m", "n", "d", "L", "R", "i", "T", "s", "K"}
_NONNEGATIVE = {"t"}
#: Column vectors (D x 1): a Gaussian mean ``mu`` and a fixed vector ``a`` of Bao et al.'s Lemma 3.
_VECTORS = {"mu", "a_vec"}
#: Scalars whose printed name is taken by a matrix symbol: table name -> printed name.
_ALIASES = {"M_vocab": "M"}
#: Real symbols of either sign: preconditioned-GD step sizes ``a_l`` and GD++ scales ``b_l``.
_REALS = {f"{x}_{l}" for x in "abc" for l in range(8)} | {"xi", "trW"}
