"""Ordinary least squares in context, the baseline of Figs. 6-7 (Ahn, Cheng, Daneshmand, Sra 2023,
App. D).

Setting of Theorems 3-4: ``x ~ N(0, Sigma)``, ``w* ~ N(0, Sigma^{-1})``, noiseless labels, ``n``
context examples. Whiten ``x = W u``, ``w* = W^{-T} v`` (``Sigma = W W^T``, ``u, v ~ N(0, I_d)``):
the labels are ``y_i = v^T u_i``, so the context fixes the projection of ``v`` on the span of
``u_1..u_n`` and nothing else. The minimum-norm least-squares solution in these coordinates
(what the authors' code computes: ``pinv(X^T X) X^T y`` on the covariates whitened by
``(U D)^{-1}``; it is also the limit of Sigma^{-1}-preconditioned GD from ``w = 0``) is ``v_hat = Pi
v`` with ``Pi`` the orthogonal projector on that span, so the query error is ``u_q^T (I - Pi) v``
and the loss is ``E tr (I - Pi) = d - rank = d - min(n, d)``: zero for ``n >= d`` (the data are
noiseless), ``d - n`` below.

``v_hat = Pi v`` is also the posterior mean ``E[v | context]`` (``v ~ N(0, I)`` given ``U^T v``),
so this loss is the Bayes risk of the task: no predictor, the trained transformer included, can
do better. In raw coordinates the minimum-norm solution is the Sigma-dependent projection
``Pi_X`` on the span of the ``x_i``; for ``n < d`` and ``Sigma`` not a multiple of ``I`` its loss
``E tr(Sigma^{-1} (I - Pi_X) Sigma (I - Pi_X))`` exceeds ``d - n`` (it has no closed form in
``n, d`` alone).

Contains
--------
``preconditioned_gd.least_squares.loss``.

References
----------
.. [1] K. Ahn, X. Cheng, H. Daneshmand, S. Sra, "Transformers learn to implement preconditioned
   gradient descent for in-context learning", NeurIPS 2023, App. D, Fig. 6.
"""

from __future__ import annotations

from ..registry import ClosedForm, register
from . import sym
from .wishart import D_DIM, N_CTX


def derive_loss():
    """``E tr (I - Pi) = d - rank(Pi)``; ``n`` Gaussian vectors in ``R^d`` span ``min(n, d)``
    dimensions almost surely."""
    import sympy as sp

    n, d = sym("n"), sym("d")
    rank = sp.Piecewise((n, n < d), (d, True))                  # min(n, d)
    return sp.piecewise_fold(d - rank)


register(ClosedForm(
    id="preconditioned_gd.least_squares.loss",
    title="Loss of minimum-norm least squares in context (whitened): d - min(n, d)",
    source="App. D, Fig. 6 (OLS) [loss derived]",
    status="exact",
    params=(N_CTX, D_DIM),
    derive=derive_loss,
    doc="x ~ N(0, Sigma), w* ~ N(0, Sigma^{-1}), noiseless. The minimum-norm solution on the whitened "
        "covariates (the authors' OLS; the limit of Sigma^{-1}-preconditioned GD from 0) projects the "
        "whitened task on the span of the n context covariates: loss d - min(n, d), 0 for n >= d. It is "
        "the posterior mean, so the loss is the Bayes risk (a lower bound for every predictor). The "
        "authors' code fits n - 1 examples (an off-by-one): d - min(n - 1, d) at their n.",
))
