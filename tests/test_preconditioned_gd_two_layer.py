"""The exact two-layer loss of verify.flows.two_layer (Theorem 2 of Ahn et al. 2023) and the record
field that labels a worked comparison form (``printed_origin``)."""

from math import prod

import numpy as np
import pytest

import theory
from theory.registry import ClosedForm
from verify.flows.two_layer import TwoLayerLoss, moment_tensor
from verify.stats import evaluate as _cf

TWO_LAYER = ("preconditioned_gd.two_layer.step_sum", "preconditioned_gd.two_layer.step_product",
             "preconditioned_gd.two_layer.optimal_loss")


# -- moments of S by pairings ----------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3, 20])
def test_moments_at_d1_are_chi_square_moments(n):
    """d = 1: S = chi^2_n / n, E S^k = n (n + 2) ... (n + 2k - 2) / n^k (independent of the pairing code)."""
    for k in (1, 2, 3, 4):
        want = prod(n + 2 * j for j in range(k)) / n**k
        assert float(moment_tensor(1, n, k).reshape(())) == pytest.approx(want, rel=1e-14)


def test_second_moment_is_the_wishart_covariance():
    d, n = 3, 7
    I = np.eye(d)
    want = (np.einsum("ij,kl->ijkl", I, I) + (np.einsum("ik,jl->ijkl", I, I) + np.einsum("il,jk->ijkl", I, I)) / n)
    np.testing.assert_allclose(moment_tensor(d, n, 2), want, rtol=0, atol=1e-15)
    np.testing.assert_allclose(moment_tensor(d, n, 2, ((1, 2),)), (n + d + 1) / n * I, rtol=0, atol=1e-15)


def test_moment_tensor_refuses_bad_sizes():
    with pytest.raises(ValueError, match="d, n, k"):
        moment_tensor(0, 3, 2)


# -- the exact loss ----------------------------------------------------------------------------
@pytest.mark.parametrize("n, d", [(20, 5), (4, 3), (3, 6)])
def test_scalar_points_match_the_registered_loss_on_S(n, d):
    """On A_l = a_l I the tensor contraction equals multi_layer.loss at Sigma = I (Wishart trace moments
    by the genus expansion of theory.preconditioned_gd.wishart): two independent computations."""
    f = TwoLayerLoss(d, n)
    for a in ([0.3, 1.1], [-0.2, 0.7], [0.0, 0.9]):
        assert f(a[0] * np.eye(d), a[1] * np.eye(d)) == pytest.approx(_cf("preconditioned_gd.multi_layer.loss",
                                                                           n=n, d=d, a=a), rel=1e-12)


def test_optimum_value_and_zero_layers():
    f = TwoLayerLoss(5, 20)
    s, p = _cf(TWO_LAYER[0], n=20, d=5), _cf(TWO_LAYER[1], n=20, d=5)
    a = np.roots([1, -s, p]).real
    assert f(a[0] * np.eye(5), a[1] * np.eye(5)) == pytest.approx(1795 / 4969, rel=1e-13)
    assert f(np.zeros((5, 5)), np.zeros((5, 5))) == pytest.approx(5.0, rel=1e-15)   # E y_q^2 = d


def test_loss_is_invariant_under_a_joint_rotation():
    """Sigma = I: f(U A_0 U^T, U A_1 U^T) = f(A_0, A_1) for orthogonal U (the rotation step of B.1)."""
    rng = np.random.default_rng(3)
    d = 4
    f = TwoLayerLoss(d, 9)
    A0, A1 = rng.standard_normal((2, d, d))
    U, _ = np.linalg.qr(rng.standard_normal((d, d)))
    assert f(U @ A0 @ U.T, U @ A1 @ U.T) == pytest.approx(f(A0, A1), rel=1e-12)


def test_proof_of_theorem2_steps_on_the_exact_loss():
    """App. B.1: f is convex in the last layer (a quadratic with a PSD second difference), and for a
    diagonal first layer Jensen over random sign matrices gives f(D_1, diag A_2) <= f(D_1, A_2)."""
    rng = np.random.default_rng(7)
    d = 4
    f = TwoLayerLoss(d, 6)
    for _ in range(5):
        D1 = np.diag(rng.uniform(0.2, 1.5, d))
        M, N = rng.standard_normal((2, d, d))
        A2, B2 = (M + M.T) / 2, (N + N.T) / 2
        assert f(D1, (A2 + B2) / 2) <= (f(D1, A2) + f(D1, B2)) / 2 + 1e-12
        assert f(D1, np.diag(np.diag(A2))) <= f(D1, A2) + 1e-12
        # sign flips leave the loss unchanged (the invariance behind Jensen's step)
        Xi = np.diag(rng.choice([-1.0, 1.0], d))
        assert f(D1, Xi @ A2 @ Xi) == pytest.approx(f(D1, A2), rel=1e-12)


def test_two_layer_loss_refuses_bad_sizes():
    with pytest.raises(ValueError, match="d, n"):
        TwoLayerLoss(0, 5)


# -- printed_origin ---------------------------------------------------------------------------
def _record(**kw):
    import sympy as sp

    base = dict(id="x.y.z", title="t", source="s", status="exact", params=(), derive=lambda: sp.Integer(1))
    return ClosedForm(**{**base, **kw})


def test_printed_origin_is_validated():
    import sympy as sp

    with pytest.raises(ValueError, match="printed_origin"):
        _record(printed=lambda: sp.Integer(1), printed_origin="spec")
    with pytest.raises(ValueError, match="printed_origin"):
        _record(printed_origin="worked")                                   # no form to label
    with pytest.raises(ValueError, match="printed_origin"):
        _record(printed=lambda: sp.Integer(2), printed_origin="worked", erratum="differs")


@pytest.mark.parametrize("cf_id", TWO_LAYER)
def test_theorem2_records_carry_worked_forms_not_the_papers(cf_id):
    cf = theory.get(cf_id)
    assert cf.printed_origin == "worked" and cf.printed_label == "Worked form (not printed in the paper)"
    assert theory.get("preconditioned_gd.single_layer.optimal_preconditioner").printed_label == "Printed in the paper"


def test_worked_forms_are_not_presented_as_the_papers():
    from verify import coverage, errata

    page = errata.page().split("\n## Ahn, Cheng, Daneshmand, Sra 2023", 1)[1].split("\n## ", 1)[0]
    confirmed = page.split("### Printed forms confirmed", 1)[1].split("###", 1)[0]
    worked = page.split("### Worked forms (not printed in the paper)", 1)[1]
    for id in TWO_LAYER:
        assert f"`{id}`" not in confirmed and f"`{id}`" in worked
        row = next(line for line in coverage.table().splitlines() if line.startswith(f"| `{id}` |"))
        assert "| derived only (equals a worked form) |" in row
