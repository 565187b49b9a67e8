"""Two layers at Sigma = I (Ahn, Cheng, Daneshmand, Sra 2023, Theorem 2).

Theorem 2 (``x, w* ~ N(0, I_d)``, two sparse layers with symmetric ``A_0, A_1``) proves a diagonal
global minimiser; it is the ``L = 2`` optimum on ``S = {A_l = a_l Sigma^{-1}}`` at ``Sigma = I``
(:mod:`theory.preconditioned_gd.multi_layer`): the steps are the roots of ``a^2 + c_1 a + c_2``
with the kernel polynomial coefficients ``c``, so ``a_0 + a_1 = -c_1``, ``a_0 a_1 = c_2``, and the
loss is ``f*_2``.

The paper states no step sizes and no loss value. The forms these records are compared with
(``printed_origin="worked"``) are rational forms in ``n, d`` worked out by hand from the
statement, not the paper's text; sympy proves them equal to the derivation. That the minimiser
over symmetric ``A_0, A_1`` is scalar (stronger than Theorem 2's "diagonal") and that its loss
and steps are these is decided numerically: ``preconditioned_gd.two_layer.mc_loss`` (the real
forward pass at the steps) and ``preconditioned_gd.two_layer.optimum_is_scalar`` (an optimiser
over symmetric, and over unconstrained, ``A_0, A_1`` on the exact loss).

Contains
--------
``preconditioned_gd.two_layer.step_sum``, ``.step_product``, ``.optimal_loss``.
"""

from __future__ import annotations

from ..registry import ClosedForm, register
from . import sym
from .multi_layer import derive_optimal_loss_of, optimal_kernel
from .wishart import D_DIM, N_CTX


def _delta(n, d):
    return (d**3 * n + d**3 + d**2 * n**2 + 5 * d**2 * n + 10 * d**2 + d * n**3 + 5 * d * n**2
            + 17 * d * n + 17 * d + n**3 + 10 * n**2 + 17 * n + 4)


def worked_step_sum():
    """a_0 + a_1 worked by hand (the paper prints no steps)."""
    n, d = sym("n"), sym("d")
    return 2 * n * (d**2 * n + d**2 + d * n**2 + 4 * d * n + 7 * d + n**2 + 7 * n + 8) / _delta(n, d)


def worked_step_product():
    """a_0 a_1 worked by hand (the paper prints no steps)."""
    n, d = sym("n"), sym("d")
    return n**2 * (d * n + d + n + 3) / _delta(n, d)


def worked_two_layer_loss():
    """f*_2 worked by hand (the paper prints no value)."""
    n, d = sym("n"), sym("d")
    return d * (d**3 * n + d**3 + 4 * d**2 * n + 10 * d**2 + 7 * d * n + 17 * d + 4 * n + 4) / _delta(n, d)


_T2 = ("x, w* ~ N(0, I_d), two sparse layers with symmetric A_0, A_1 (Theorem 2 proves a diagonal "
       "global minimiser; numerically it is scalar, A_l = a_l I). This is the L = 2 optimum on S at "
       "Sigma = I: the steps are the roots of a^2 + c_1 a + c_2 (c = kernel polynomial coefficients).")

register(ClosedForm(
    id="preconditioned_gd.two_layer.step_sum",
    title="a_0 + a_1 = -c_1 at the two-layer optimum (Sigma = I)",
    source="Theorem 2 [steps derived]",
    status="exact",
    params=(N_CTX, D_DIM),
    derive=lambda: -optimal_kernel(2)[0],
    printed=worked_step_sum,
    printed_origin="worked",
    doc=_T2 + " The paper gives no step sizes; the comparison form is a rational form worked by hand.",
))

register(ClosedForm(
    id="preconditioned_gd.two_layer.step_product",
    title="a_0 a_1 = c_2 at the two-layer optimum (Sigma = I)",
    source="Theorem 2 [steps derived]",
    status="exact",
    params=(N_CTX, D_DIM),
    derive=lambda: optimal_kernel(2)[1],
    printed=worked_step_product,
    printed_origin="worked",
    doc=_T2 + " The comparison form is a rational form worked by hand (the paper prints no steps).",
))

register(ClosedForm(
    id="preconditioned_gd.two_layer.optimal_loss",
    title="f*_2, the two-layer optimal loss (Sigma = I)",
    source="Theorem 2 [value derived]",
    status="exact",
    params=(N_CTX, D_DIM),
    derive=lambda: derive_optimal_loss_of(2),
    printed=worked_two_layer_loss,
    printed_origin="worked",
    doc=_T2 + " The comparison form is a rational form worked by hand (the paper prints no value); "
              "n = 20, d = 5 gives 1795/4969.",
))
