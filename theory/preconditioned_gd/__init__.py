"""Ahn, Cheng, Daneshmand, Sra 2023: linear transformers implement preconditioned gradient descent.

Modules
-------
Every module here is imported by the registry on first use (see :mod:`theory.papers`).

:mod:`~theory.preconditioned_gd.correlated_wishart`
    Mixed moments E prod tr(Sigma^{e_1} W Sigma^{e_2} W ...) of a correlated Wishart matrix, by the
    loop equations (the plain-GD loss at a general Sigma).
:mod:`~theory.preconditioned_gd.distorted_view`
    The least-squares risk of one prompt and its Hessian (Ahn, Cheng, Daneshmand, Sra 2023, §4.2).
:mod:`~theory.preconditioned_gd.forward`
    Forward-pass identities in moment form: eq. 13, the single-layer loss of any (P, Q) (eqs.
    14-15), the label row and the context covariance through L layers (Lemmas 5-6, eqs. 25, 34, 57).
:mod:`~theory.preconditioned_gd.gdpp`
    GD++: the general (full) layers of eq. 11 on the set of Theorem 4 (Ahn, Cheng, Daneshmand,
    Sra 2023, §5, Theorem 4, App. B.3), up to three layers, and its optimum.
:mod:`~theory.preconditioned_gd.multi_layer`
    L-layer linear transformers on the critical set of Theorem 3 (Ahn, Cheng, Daneshmand, Sra
    2023), any depth; plain GD at a general Sigma (App. D).
:mod:`~theory.preconditioned_gd.relu`
    Single-layer ReLU attention: Theorem 5 of Ahn, Cheng, Daneshmand, Sra 2023 (§6, App. A.4).
:mod:`~theory.preconditioned_gd.single_layer`
    The single-layer optimum of Ahn, Cheng, Daneshmand, Sra 2023 (Theorem 1, eqs. 6-7).
:mod:`~theory.preconditioned_gd.spectral_measure`
    The expected spectral measure of the white Wishart covariance: Jacobi matrices and Gauss rules.
:mod:`~theory.preconditioned_gd.two_layer`
    Two layers at Sigma = I (Ahn, Cheng, Daneshmand, Sra 2023, Theorem 2).
:mod:`~theory.preconditioned_gd.wishart`
    Trace moments of a real white Wishart matrix, by the loop equations (Gaussian integration by parts).
"""

from ..papers import Paper
from ..symbols import Symbols

#: The paper of this topic (declared once; :data:`theory.papers.PAPERS` is built from it).
PAPER = Paper(authors=("Ahn", "Cheng", "Daneshmand", "Sra"), year=2023,
              title="Transformers learn to implement preconditioned gradient descent for in-context learning",
              venue="NeurIPS 2023", arxiv="2306.00297",
              names=("Ahn, Kwangjun", "Cheng, Xiang", "Daneshmand, Hadi", "Sra, Suvrit"),
              booktitle="Advances in Neural Information Processing Systems 36 (NeurIPS 2023)")

#: The symbols of this paper: Sigma (and Lambda, M, A, P of the merged-model correspondence) are
#: D x D; L, R, d, n, s are counts, k an order from 0; the step sizes a_l, b_l, c_l, eta are real of either
#: sign. The forward identities (:mod:`.forward`): the context covariance S, the layer blocks A_x, A_l, B, B_l
#: (D x D), the prompt's w, x_q and the blocks b_x, a_y (columns), the label-label entry b_y (real).
SYMBOLS = Symbols(matrices=("Lambda", "Sigma", "M", "A", "P", "S", "A_x", "B", "A_0", "A_1", "A_2", "B_0", "B_1"),
                  vectors=("w", "x_q", "b_x", "a_y"), integers=("L", "R", "d", "n", "s"), naturals=("k",),
                  nonnegative=("t",), reals=("b_y", "eta") + tuple(f"{x}_{l}" for x in "abc" for l in range(8)))
#: ``sym(name)``: the sympy object of a name in this topic (modules: ``from . import sym``).
sym = SYMBOLS
