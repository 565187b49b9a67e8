"""Tian, Wang, Chen, Du 2023, "Scan and Snap": training dynamics of a 1-layer transformer.

Modules
-------
Every module here is imported by the registry on first use (see :mod:`theory.papers`).

:mod:`~theory.scan_snap.attention`
    Self-attention dynamics of Scan and Snap (Tian, Wang, Chen, Du 2023, §5-6, App. E-F).
:mod:`~theory.scan_snap.decoder`
    The decoder of Scan and Snap (Tian, Wang, Chen, Du 2023, §4, Lemma 5, eqs. 31-33, 39, 71).
:mod:`~theory.scan_snap.growth`
    The growth factor of distinct tokens and the consequences of Theorem 4 (Tian, Wang, Chen, Du
    2023, Theorem 3 eq. 12, Theorem 4's bullets and insights, App. F eqs. 130-133, Fig. 9).
:mod:`~theory.scan_snap.h`
    The h recursion of Scan and Snap and everything built on it (Tian, Wang, Chen, Du 2023, App.
    D).
:mod:`~theory.scan_snap.speed`
    The speed control coefficient of Scan and Snap and the times it sets (Tian, Wang, Chen, Du
    2023, Theorem 1, Lemma 9, Corollary 1, eqs. 50-52, 85, 125-128).
"""

from ..papers import Paper
from ..symbols import Symbols

#: The paper of this topic (declared once; :data:`theory.papers.PAPERS` is built from it).
PAPER = Paper(authors=("Tian", "Wang", "Chen", "Du"), year=2023,
              title="Scan and Snap: Understanding Training Dynamics and Token Composition in 1-layer Transformer",
              venue="NeurIPS 2023", arxiv="2305.16380",
              names=("Tian, Yuandong", "Wang, Yiping", "Chen, Beidi", "Du, Simon S."),
              booktitle="Advances in Neural Information Processing Systems 36 (NeurIPS 2023)")

#: The symbols of this paper: M is the vocabulary size (an integer, not a matrix), K and s are
#: counts (s from 0), time t, h and dz are nonnegative; every other name is a positive real.
SYMBOLS = Symbols(integers=("M", "K"), naturals=("s",), nonnegative=("t", "h", "dz", "B"),
                  latex={"f_nl": r"f_{\mathrm{nl}}", "f_npl": r"f_{\mathrm{npl}}"})
#: ``sym(name)``: the sympy object of a name in this topic (modules: ``from . import sym``).
sym = SYMBOLS
