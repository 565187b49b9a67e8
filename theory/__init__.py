"""Closed forms of how attention learns, derived in sympy and emitted as numeric functions.

Each result of a paper is a registered :class:`ClosedForm` with a stable id::

    >>> import theory
    >>> cf = theory.get("linear_attention.data.lambda_hat_sq")
    >>> cf.citation
    'Zhang, Singh, Latham, Saxe 2025, eqs. 15, 30, 31'
    >>> cf(Lambda=[1.0, 0.5], N=4)
    array([[1.625, 0.   ],
           [0.   , 0.5  ]])

``get(id)`` returns a record, ``ids()`` lists them. Records derive their sympy
expression on first use (``cf.expr``), and emit numpy / mpmath / torch functions once; the
emitted code is kept in a cache on disk (:mod:`theory.cache`), from which a later process
loads it without deriving. ``import theory`` is cheap: sympy is imported only when a record is
first derived or emitted.

Command line: ``python -m theory list [PREFIX] | show ID | eval ID --json '{...}' | cite ID | cache info``.

Citing: :func:`bibtex` gives the BibTeX entry of the paper a record (or a check, or a topic) comes
from, ``python -m theory cite ID`` prints it; the toolkit itself is cited from ``CITATION.cff``.

Extension API
-------------
A paper is a topic package: its ``__init__`` declares ``PAPER = Paper(...)`` and its symbol
table ``SYMBOLS = Symbols(...)`` (which names are matrices, integers, reals ...; one letter can
mean different things in two papers), and its modules call :func:`register` with
:class:`ClosedForm` records whose parameters are :class:`Param` objects (made with
:func:`positive`, :func:`nonnegative`, :func:`real`, :func:`index`, :func:`covariance`,
:func:`matrix`, :func:`vector`, :func:`subset`, :func:`steps`), whose ``source`` is the place in
the paper (``"eq. 10"``; the citation is derived) and whose expressions use the topic's symbols.
Built-in topics live in ``theory/<topic>/``; an installed package adds one through the entry-point
group ``attention_dynamics_theory.topics`` (:data:`TOPICS_GROUP`); see ``docs/adding-a-paper.md``
and ``examples/saxe_linear_network``.
"""

from ._version import __version__
from .papers import CHECKS_GROUP, PAPERS, TOPICS_GROUP, Paper, PluginError, bibtex, paper_of, symbols_of
from .params import Param, covariance, index, matrix, nonnegative, positive, real, steps, subset, vector
from .registry import ClosedForm, get, ids, records, register
from .symbols import Symbols

__all__ = ["__version__", "ClosedForm", "Param", "Paper", "PAPERS", "PluginError", "TOPICS_GROUP", "CHECKS_GROUP",
           "get", "ids", "records", "register", "paper_of", "bibtex", "symbols_of", "Symbols", "covariance", "index",
           "matrix", "nonnegative", "positive", "real", "steps", "subset", "vector"]
