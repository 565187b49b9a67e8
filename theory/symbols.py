"""Symbol tables: the sympy object behind each parameter name, declared once per topic.

One letter can mean different things in two papers (``M`` is a D x D matrix in Zhang et al.
2025 and a vocabulary size in Tian et al. 2023), so every topic package declares its own
table in its ``__init__``::

    from theory import Symbols

    SYMBOLS = Symbols(matrices=("Lambda", "M"), integers=("N",), nonnegative=("t",))
    sym = SYMBOLS  # modules write ``from . import sym`` and ``sym("Lambda")``

A name that the table does not list is a positive real symbol. The registry builds the
arguments of every emitted function from the record's topic table
(:func:`theory.papers.symbols_of`), and refuses a parameter whose kind disagrees with its
symbol (an ``index`` parameter needs an integer symbol, a ``covariance`` a D x D matrix, and
so on: :meth:`Symbols.check_param`), so that a forgotten entry fails at registration, loudly.

Nothing here is specific to a paper; symbols are created on first use (sympy is imported
lazily).
"""

from __future__ import annotations

from functools import cache

__all__ = ["Symbols", "dim", "KIND_ASSUMPTIONS"]


@cache
def dim():
    """The symbolic matrix size D (also the parameter ``D`` where one is declared)."""
    import sympy as sp

    return sp.Symbol("D", integer=True, positive=True)


#: What a parameter kind requires of its symbol: ``matrix`` (D x D), ``vector`` (D x 1), or the
#: sympy assumption that must hold (``integer``, ``nonnegative``, ``real``, ``positive``).
#: ``subset`` and ``steps`` parameters are not symbols (they enter through derived values).
KIND_ASSUMPTIONS = {"covariance": "matrix", "matrix": "matrix", "vector": "vector", "index": "integer",
                    "positive": "positive", "nonnegative": "nonnegative", "real": "real"}


class Symbols:
    """A topic's symbol table (see the module docstring).

    Parameters
    ----------
    matrices : sequence of str
        Names of D x D ``MatrixSymbol`` objects (matrix parameters, eigen-projectors).
    vectors : sequence of str
        Names of D x 1 ``MatrixSymbol`` objects (column vectors).
    integers : sequence of str
        Names of positive integer symbols (counts, dimensions, positions).
    naturals : sequence of str
        Names of nonnegative integer symbols (counts that may be zero).
    nonnegative : sequence of str
        Names of nonnegative real symbols (e.g. time ``t``).
    reals : sequence of str
        Names of real symbols of either sign.
    latex : mapping of str to str
        How a name is typeset where sympy's own rule would mislead (it reads a trailing digit
        as a subscript, so a name ``trX2`` would show as trX₂ rather than tr X²), e.g.
        ``{"trX2": r"\\operatorname{tr}(X^{2})"}`` (parenthesised, so that a power of the
        name reads right); see :meth:`latex`.

    Notes
    -----
    Every other name is a positive real symbol; ``D`` is always :func:`dim`. A name listed
    twice is refused with ``ValueError``.
    """

    def __init__(self, *, matrices=(), vectors=(), integers=(), naturals=(), nonnegative=(), reals=(), latex=None):
        groups = {"matrices": matrices, "vectors": vectors, "integers": integers, "naturals": naturals,
                  "nonnegative": nonnegative, "reals": reals}
        self._kind: dict[str, str] = {}
        for group, names in groups.items():
            if isinstance(names, str):
                raise ValueError(f"{group}: expected a sequence of names, got a string")
            for n in names:
                if not isinstance(n, str) or not n.isidentifier():
                    raise ValueError(f"{group}: {n!r} is not a valid symbol name")
                if n in self._kind or n == "D":
                    raise ValueError(f"{group}: {n!r} is declared twice (or is the dimension D)")
                self._kind[n] = group
        self._made: dict = {}
        self._latex = dict(latex or {})
        for n, text in self._latex.items():
            if not isinstance(n, str) or not n.isidentifier() or not isinstance(text, str) or not text:
                raise ValueError(f"latex: expected names mapped to LaTeX text, got {n!r}: {text!r}")

    def latex(self, expr, **settings) -> str:
        """``sympy.latex(expr)`` with this table's names typeset as declared (``latex=``);
        ``settings`` go to :func:`sympy.latex`."""
        import sympy as sp

        names = {s: self._latex[s.name] for s in expr.atoms(sp.Symbol, sp.MatrixSymbol)
                 if getattr(s, "name", None) in self._latex}
        return sp.latex(expr, symbol_names=names, **settings)

    def __call__(self, name: str):
        """The sympy object for ``name``."""
        obj = self._made.get(name)
        if obj is None:
            obj = self._made[name] = self._make(name)
        return obj

    def kind_of(self, name: str) -> str:
        """``matrices``, ``vectors``, ``integers``, ``naturals``, ``nonnegative``, ``reals`` or
        ``positive``."""
        return "integers" if name == "D" else self._kind.get(name, "positive")

    def _make(self, name: str):
        import sympy as sp

        if name == "D":
            return dim()
        kind = self.kind_of(name)
        if kind == "matrices":
            return sp.MatrixSymbol(name, dim(), dim())
        if kind == "vectors":
            return sp.MatrixSymbol(name, dim(), 1)
        if kind == "integers":
            return sp.Symbol(name, integer=True, positive=True)
        if kind == "naturals":
            return sp.Symbol(name, integer=True, nonnegative=True)
        if kind == "nonnegative":
            return sp.Symbol(name, nonnegative=True)
        if kind == "reals":
            return sp.Symbol(name, real=True)
        return sp.Symbol(name, positive=True)

    def check_param(self, p, where: str = "") -> None:
        """``ValueError`` when parameter ``p``'s values do not all satisfy its symbol's assumptions
        here, so that a simplification sympy makes under them could be wrong at a valid value: a
        ``covariance`` or ``matrix`` needs a D x D matrix symbol, a ``vector`` a D x 1 one; an
        ``index`` (integers from ``low``) a positive (only where ``low >= 1``) or nonnegative
        symbol, integer or not; a ``positive`` parameter a positive, nonnegative or real symbol (an
        integer symbol would let sympy assume integrality); a ``nonnegative`` one a nonnegative or
        real symbol; a ``real`` one a real symbol."""
        have = self.kind_of(p.name)
        scalar_ok = {
            "index": (("integers", "positive") if p.low >= 1 else ()) + ("naturals", "nonnegative", "reals"),
            "positive": ("positive", "nonnegative", "reals"),
            "nonnegative": ("nonnegative", "reals"),
            "real": ("reals",),
            "covariance": ("matrices",), "matrix": ("matrices",), "vector": ("vectors",),
        }.get(p.kind)
        if scalar_ok is None or have in scalar_ok:
            return
        raise ValueError(f"{p.name}: a {p.kind} parameter{' of ' + where if where else ''} cannot stand on a "
                         f"{_WORDS[have]} symbol (some valid values break its assumptions); declare "
                         f"{p.name!r} in the topic's Symbols(...) as one of: "
                         f"{', '.join(_WORDS[k] for k in scalar_ok)}")

    def __repr__(self) -> str:
        groups: dict[str, list[str]] = {}
        for n, g in self._kind.items():
            groups.setdefault(g, []).append(n)
        return "Symbols(" + ", ".join(f"{g}={tuple(v)!r}" for g, v in groups.items()) + ")"


_WORDS = {"matrices": "D x D matrix", "vectors": "D x 1 vector", "integers": "positive integer",
          "naturals": "nonnegative integer", "positive": "positive real", "nonnegative": "nonnegative real",
          "reals": "real"}

#: The table of a topic that declares none: every name a positive real symbol.
DEFAULT = Symbols()
