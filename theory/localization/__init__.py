"""Bao, Hataya, Karakida 2024: self-attention localises when the QK-eigenspectrum concentrates.

Modules
-------
Every module here is imported by the registry on first use (see :mod:`theory.papers`).

:mod:`~theory.localization.bounds`
    Norm bounds of W_QK from the eigenspectrum (Bao, Hataya, Karakida 2024, eqs. 7, 10).
:mod:`~theory.localization.eigen`
    Eigenspectrum statistics of W = W_QK Sigma (Bao, Hataya, Karakida 2024, eqs. 5, 6, 8, 10).
:mod:`~theory.localization.entropy`
    The attention-entropy lower bound (Bao, Hataya, Karakida 2024, eq. 9; Zhai et al. 2023, Thm
    3.1).
:mod:`~theory.localization.gaussian`
    Gaussian moments with a mean: Lemma 3 of Bao, Hataya, Karakida 2024 (App. A, eqs. 11-14).
:mod:`~theory.localization.locater`
    The LOCATER regulariser and its gradients (Bao, Hataya, Karakida 2024, Sec. 6).
:mod:`~theory.localization.orders`
    The factors of the order evaluation of the QK-gradient (Bao, Hataya, Karakida 2024, App.
    B.2).
:mod:`~theory.localization.random_walk`
    Random-walk tokens and their moments (Bao, Hataya, Karakida 2024, §2, Assumption 1, Lemma 4,
    eq. 22).
:mod:`~theory.localization.rho`
    The signal-propagation probability rho (Bao, Hataya, Karakida 2024, Definition 1, Sec. 4).
:mod:`~theory.localization.softmax`
    The softmax at the origin (Bao, Hataya, Karakida 2024, §2, R1).
:mod:`~theory.localization.u`
    Mean and variance of the linearised-softmax signal u_i (Bao, Hataya, Karakida 2024, §2,
    Lemma 1).
"""

from ..papers import Paper
from ..symbols import Symbols

#: The paper of this topic (declared once; :data:`theory.papers.PAPERS` is built from it).
PAPER = Paper(authors=("Bao", "Hataya", "Karakida"), year=2024,
              title="Self-attention Networks Localize When QK-eigenspectrum Concentrates", venue="ICML 2024",
              arxiv="2402.02098", names=("Bao, Han", "Hataya, Ryuichiro", "Karakida, Ryo"),
              booktitle="Proceedings of the 41st International Conference on Machine Learning (PMLR 235)")

#: The symbols of this paper: Sigma and the query/key matrices are D x D, mu and a_vec columns;
#: T, d, i are counts and positions; xi, tr(W) and tr(W_QK) may be negative.
SYMBOLS = Symbols(matrices=("Sigma", "W_Q", "W_K", "W_QK"), vectors=("mu", "a_vec"),
                  integers=("T", "d", "i"), reals=("xi", "trW", "trW_QK"),
                  latex={"trW": r"(\operatorname{tr} W)", "trW_QK": r"(\operatorname{tr} W_{QK})",
                         "trW2": r"\operatorname{tr}(W^{2})",
                         "trP": r"(\operatorname{tr} P)", "trP2": r"\operatorname{tr}(P^{2})",
                         "sigma_max": r"\sigma_{\max}", "sigma_min": r"\sigma_{\min}", "a_vec": r"\boldsymbol{a}",
                         "temperature": r"\mathrm{temperature}"})
#: ``sym(name)``: the sympy object of a name in this topic (modules: ``from . import sym``).
sym = SYMBOLS
