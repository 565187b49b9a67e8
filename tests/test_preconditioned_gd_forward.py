"""The forward identities in moment form (theory.preconditioned_gd.forward): derivations and
properties; the per-prompt comparison with the forward pass is the checks' (verify.checks.
preconditioned_gd.forward)."""

import itertools

import numpy as np
import pytest
import sympy as sp

import theory
from theory.preconditioned_gd import forward as fw

OUT = "preconditioned_gd.forward.single_layer_output"
LOSS = "preconditioned_gd.forward.reduced_loss"
RES = "preconditioned_gd.forward.residual_operator"
COV = "preconditioned_gd.forward.covariance_step"


def _spd(rng, d):
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (q * rng.uniform(0.2, 2.0, d)) @ q.T


def test_eq13_derived_from_the_layer_equals_the_printed_form():
    r = theory.get(OUT)
    assert r.equal(r.expr, r.printed_expr)


def test_eq14_the_dropped_blocks_would_enter_with_a_nonzero_query_label():
    """The derivation asserts that the first d rows of P and the last column of Q drop out; they
    drop out *because* the query's label slot is 0 (eq. 1): with a label y there, q_x and q_y enter."""
    D, Xc, n, w, xq, b_x, b_y, A_x, a_y, _ = fw._single_layer_blocks()
    irr = fw.irrelevant_blocks()
    y = sp.Symbol("y", real=True)
    Z = sp.BlockMatrix([[Xc, xq], [w.T * Xc, y * sp.Identity(1)]])
    P = sp.BlockMatrix([[irr["P_xx"], irr["p_xy"]], [b_x.T, b_y * sp.Identity(1)]])
    Q = sp.BlockMatrix([[A_x, irr["q_x"]], [a_y.T, irr["q_y"] * sp.Identity(1)]])
    out = fw.to_moments(fw.block_layer(Z, P, Q).blocks[1, 1])
    assert out.has(irr["q_x"]) and out.has(irr["q_y"])
    assert not out.has(irr["P_xx"]) and not out.has(irr["p_xy"])  # the label row of P only


def test_layer_step_is_the_moment_recursion():
    T_next, F, g = fw.layer_step()
    S = fw._sym("S")
    T, A, B = g["T"], g["A"], g["B"]
    D = T.shape[0]
    assert sp.expand(T_next - (T + B * T * S * T.T * A * T)).doit() == sp.ZeroMatrix(D, D)
    assert sp.expand(F - (sp.Identity(D) + T.T * A.T * T * S)).doit() == sp.ZeroMatrix(D, D)


def test_reduced_loss_slice_is_the_single_layer_loss():
    """b = e_{d+1}, A_x = -A, a_y = 0: the sparse form of Theorem 1 (single_layer.loss)."""
    rng = np.random.default_rng(1)
    for d, n in ((2, 3), (4, 7)):
        Sigma, A = _spd(rng, d), rng.standard_normal((d, d))
        f = theory.get(LOSS)(Sigma=Sigma, n=n, b_x=np.zeros(d), b_y=1.0, A_x=-A, a_y=np.zeros(d))
        g = theory.get("preconditioned_gd.single_layer.loss")(Sigma=Sigma, n=n, A=A)
        assert f == pytest.approx(g, rel=1e-12)


def test_reduced_loss_is_stationary_over_every_b_and_A_at_theorem1():
    """Theorem 1 claims global optimality over all (P, Q): f(b, A) (every direction of b and A,
    not only the sparse block) is stationary at b = e_{d+1}, A_x = -Gamma*, a_y = 0; a
    perturbed point is not."""
    rng = np.random.default_rng(2)
    d, n = 3, 5
    Sigma = _spd(rng, d)
    G = theory.get("preconditioned_gd.single_layer.optimal_preconditioner")(Sigma=Sigma, n=n)
    f = theory.get(LOSS)
    theta0 = np.r_[np.zeros(d), 1.0, (-G).ravel(), np.zeros(d)]

    def loss(t):
        return f(Sigma=Sigma, n=n, b_x=t[:d], b_y=t[d], A_x=t[d + 1:d + 1 + d * d].reshape(d, d), a_y=t[-d:])

    def grad(t, h=1e-5):
        e = np.eye(t.size)
        return np.array([(loss(t + h * e[i]) - loss(t - h * e[i])) / (2 * h) for i in range(t.size)])

    assert np.max(np.abs(grad(theta0))) < 1e-7
    assert loss(theta0) == pytest.approx(theory.get("preconditioned_gd.single_layer.optimal_loss")(Sigma=Sigma, n=n))
    theta1 = theta0 + 0.05 * rng.standard_normal(theta0.size)
    assert np.max(np.abs(grad(theta1))) > 1e-3


def test_residual_operator_sparse_form_is_preconditioned_gd_with_the_transpose():
    """B_l = 0 (eq. 25): R = (I + A_2^T S)(I + A_1^T S)(I + A_0^T S); zero A_2 gives two layers."""
    rng = np.random.default_rng(3)
    d = 3
    S, A = _spd(rng, d), rng.standard_normal((3, d, d)) * 0.4
    Z = np.zeros((d, d))
    I = np.eye(d)
    R = theory.get(RES)(S=S, A_0=A[0], A_1=A[1], A_2=A[2], B_0=Z, B_1=Z)
    assert np.allclose(R, (I + A[2].T @ S) @ (I + A[1].T @ S) @ (I + A[0].T @ S), rtol=1e-13, atol=1e-13)
    R2 = theory.get(RES)(S=S, A_0=A[0], A_1=A[1], A_2=Z, B_0=Z, B_1=Z)
    assert np.allclose(R2, (I + A[1].T @ S) @ (I + A[0].T @ S), rtol=1e-13, atol=1e-13)


def test_residual_operator_lemma4_symmetric_on_the_critical_set():
    rng = np.random.default_rng(4)
    d = 4
    Sigma, S = _spd(rng, d), _spd(rng, d)
    Sinv = np.linalg.inv(Sigma)
    a, Z = rng.uniform(-1.5, -0.2, 3), np.zeros((d, d))
    rec = theory.get(RES)
    values = [rec(S=S, A_0=a[p[0]] * Sinv, A_1=a[p[1]] * Sinv, A_2=a[p[2]] * Sinv, B_0=Z, B_1=Z)
              for p in itertools.permutations(range(3))]
    for v in values[1:]:
        assert np.allclose(v, values[0], rtol=1e-12, atol=1e-12)
    # with B_l = b_l I (GD++) the layers do not commute
    B = 0.7 * np.eye(d)
    gdpp = [rec(S=S, A_0=a[p[0]] * Sinv, A_1=a[p[1]] * Sinv, A_2=a[p[2]] * Sinv, B_0=B, B_1=B)
            for p in itertools.permutations(range(3))]
    assert max(np.max(np.abs(v - gdpp[0])) for v in gdpp[1:]) > 1e-3


def test_residual_operator_ignores_the_last_b():
    """B_2 never enters (footnote 4): the record has no B_2 parameter; and B_1 does enter."""
    assert "B_2" not in theory.get(RES).param_names
    rng = np.random.default_rng(5)
    d = 3
    S, A, B = _spd(rng, d), rng.standard_normal((3, d, d)) * 0.4, rng.standard_normal((2, d, d)) * 0.4
    rec = theory.get(RES)
    R = rec(S=S, A_0=A[0], A_1=A[1], A_2=A[2], B_0=B[0], B_1=B[1])
    R_other = rec(S=S, A_0=A[0], A_1=A[1], A_2=A[2], B_0=B[0], B_1=B[1] + 0.1)
    assert np.max(np.abs(R - R_other)) > 1e-4


def test_covariance_step_on_theorem4_set_is_the_gdpp_curvature_correction():
    """A = a Sigma^{-1}, B = b I, S = W S_u W^T (Sigma = W W^T): S' = W S_u (I + a b S_u)^2 W^T."""
    rng = np.random.default_rng(6)
    d = 4
    W = rng.standard_normal((d, d))
    Sigma, S_u = W @ W.T, _spd(rng, d)
    a, b = -0.8, 0.6
    S1 = theory.get(COV)(S=W @ S_u @ W.T, A=a * np.linalg.inv(Sigma), B=b * np.eye(d))
    K = np.eye(d) + a * b * S_u
    assert np.allclose(S1, W @ S_u @ K @ K @ W.T, rtol=1e-10, atol=1e-10)
    # the sparse form (B = 0) leaves the covariance unchanged (eq. 25: X_l = X_0)
    S = _spd(rng, d)
    assert np.allclose(theory.get(COV)(S=S, A=rng.standard_normal((d, d)), B=np.zeros((d, d))), S)


def test_records_match_the_forward_pass_on_one_prompt():
    """One prompt, exact: the records against verify's forward pass (the checks do many)."""
    from verify.models.linear_transformer import forward, general_layers
    from verify.tasks.preconditioned_gd import sample_prompts

    rng = np.random.default_rng(7)
    d, n = 3, 4
    pr = sample_prompts(rng, _spd(rng, d), n, 1, task="inverse")
    Z0 = pr.tokens()
    P, Q = rng.standard_normal((1, d + 1, d + 1)), rng.standard_normal((1, d + 1, d + 1))
    out = theory.get(OUT)(S=pr.S[0], w=pr.w[0], x_q=pr.query[0], b_x=P[0, d, :d], b_y=P[0, d, d],
                          A_x=Q[0, :d, :d], a_y=Q[0, d, :d])
    assert out == pytest.approx(forward(Z0, P, Q)[0, d, n], rel=1e-12)
    A, B = rng.standard_normal((3, d, d)) * 0.3, rng.standard_normal((3, d, d)) * 0.3
    tf = -forward(Z0, *general_layers(A, B))[0, d, n]
    R = theory.get(RES)(S=pr.S[0], A_0=A[0], A_1=A[1], A_2=A[2], B_0=B[0], B_1=B[1])
    assert pr.query[0] @ R @ pr.w[0] == pytest.approx(pr.target[0] - tf, rel=1e-12)


@pytest.mark.parametrize("bad", [np.eye(2), np.eye(2)[None]])
def test_a_mismatched_dimension_names_the_odd_parameter(bad):
    """The dimension most sized parameters share is fixed first, so the error names S, not A_0."""
    eye = np.eye(3)
    with pytest.raises(ValueError, match=r"^S: dimension 2 does not match D = 3"):
        theory.get(RES)(S=bad, A_0=eye, A_1=eye, A_2=eye, B_0=eye, B_1=eye)
    with pytest.raises(ValueError, match=r"^A_1: dimension 2 does not match D = 3"):
        theory.get(RES)(S=eye, A_0=eye, A_1=np.eye(2), A_2=eye, B_0=eye, B_1=eye)
