"""Closed forms of the separate key/query model (Zhang et al. 2025, §4, App. E)."""

import itertools

import numpy as np
import pytest
import sympy as sp

import theory
from theory.linear_attention import separate

FIG1 = [0.4, 0.3, 0.2, 0.1]


def _get(id):
    return theory.get(f"linear_attention.separate.{id}")


def test_plateau_levels_and_drops_match_the_spec_numbers():
    # independent hand values: N = 31, spectrum (0.4, 0.3, 0.2, 0.1)
    levels = [_get("saddle_loss")(Lambda=FIG1, N=31, m=m) for m in range(5)]
    np.testing.assert_allclose(levels, [1, 0.640580, 0.377372, 0.209805, 0.135995], atol=5e-7)
    drops = [_get("drop_size")(Lambda=FIG1, N=31, m=m) for m in range(1, 5)]
    np.testing.assert_allclose(drops, [0.35942, 0.26321, 0.16757, 0.07381], atol=5e-6)


def test_drop_erratum_is_the_large_N_value():
    cf = _get("drop_size")
    assert cf.erratum
    assert cf(Lambda=FIG1, N=31, m=1, printed=True) == pytest.approx(0.4)
    assert cf(Lambda=FIG1, N=10**9, m=1) == pytest.approx(0.4, rel=1e-8)


def test_last_saddle_is_the_merged_global_minimum():
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    Lam = (q * np.array(FIG1)) @ q.T
    for N in (1, 7, 31, 10**6):
        assert _get("saddle_loss")(Lambda=Lam, N=N, m=4) == pytest.approx(
            theory.get("linear_attention.merged.global_min_loss")(Lambda=Lam, N=N), rel=1e-12)
        np.testing.assert_allclose(_get("fixed_point_matrix")(Lambda=Lam, N=N, S=[1, 2, 3, 4]),
                                   theory.get("linear_attention.merged.converged_matrix")(Lambda=Lam, N=N),
                                   rtol=1e-10, atol=1e-12)


def test_every_subset_is_a_fixed_point_in_function_space():
    # G(M_S) = Lambda^2 - E[Lhat^2] M_S Lambda vanishes on the directions in S (eq. 60)
    lam, p = sp.Symbol("lam", positive=True), sp.Symbol("p", nonnegative=True)
    img = separate.fixed_point_gradient_image()
    assert sp.simplify(img - lam**2 * (1 - p)) == 0
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    Lam = (q * np.array(FIG1)) @ q.T
    V = separate.eigenvectors_descending(Lam)
    for k in range(5):
        for S in itertools.combinations(range(1, 5), k):
            M = _get("fixed_point_matrix")(Lambda=Lam, N=7, S=list(S))
            G = theory.get("linear_attention.merged.gradient")(Lambda=Lam, N=7, M=M)
            for d in S:  # G e_d = 0 and e_d^T G = 0 on learned directions
                assert np.linalg.norm(G @ V[:, d - 1]) < 1e-12
            assert _get("subset_loss")(Lambda=Lam, N=7, S=list(S)) == pytest.approx(
                theory.get("linear_attention.merged.loss")(Lambda=Lam, N=7, M=M), rel=1e-12)


def test_saddle_losses_decrease_and_drops_sum_up():
    for N in (1, 5, 100):
        levels = np.array([_get("saddle_loss")(Lambda=FIG1, N=N, m=m) for m in range(5)])
        assert np.all(np.diff(levels) < 0)
        drops = [_get("drop_size")(Lambda=FIG1, N=N, m=m) for m in range(1, 5)]
        assert sum(drops) == pytest.approx(levels[0] - levels[-1], rel=1e-12)


def test_scalar_ode_fixed_point_is_the_min_norm_value():
    # eq. 20a: v* = (lambda/a)^(1/3) is the nonzero root of eq. 21
    cf = _get("scalar_ode_rhs")
    lam, a = 0.3, 0.11
    assert abs(cf(v=(lam / a) ** (1 / 3), lam=lam, a=a, tau=1.0)) < 1e-15
    assert cf(v=0.5 * (lam / a) ** (1 / 3), lam=lam, a=a, tau=1.0) > 0


def test_escape_time_is_the_blow_up_of_the_quadratic_part():
    cf = _get("escape_time")
    assert cf(Lambda=FIG1, N=31, m=2, tau=2.0, w_init=1e-3) == pytest.approx(2.0 / (0.3**2 * 1e-3))


@pytest.mark.parametrize("call, name", [
    (lambda: _get("saddle_loss")(Lambda=FIG1, N=31, m=5), "m"),
    (lambda: _get("saddle_loss")(Lambda=FIG1, N=31, m=-1), "m"),
    (lambda: _get("drop_size")(Lambda=FIG1, N=31, m=0), "m"),
    (lambda: _get("subset_loss")(Lambda=FIG1, N=31, S=[5]), "S"),
    (lambda: _get("subset_loss")(Lambda=FIG1, N=31, S=[1, 1]), "S"),
    (lambda: _get("subset_loss")(Lambda=FIG1, N=31, S="12"), "S"),
    (lambda: _get("fixed_point_matrix")(Lambda=FIG1, N=0, S=[1]), "N"),
], ids=["saddle-m-too-large", "saddle-m-negative", "drop-m-zero", "subset-out-of-range",
        "subset-repeated", "subset-string", "fixed-point-N"])
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=f"^{name}:"):
        call()


def test_ntp_saddles_use_the_inverse_length_mean():
    nu = theory.get("linear_attention.ntp.inv_length_mean")(N_max=31)
    lam = np.array(FIG1)
    for m in range(5):
        hand = 1 - sum(l / (1 + nu * (1 + 1 / l)) for l in lam[:m])  # eq. 26, tr Lambda = 1
        value = theory.get("linear_attention.ntp.saddle_loss")(Lambda=FIG1, N_max=31, m=m)
        assert value == pytest.approx(hand, rel=1e-12)


def test_conservation_laws_eq82_eq88():
    from theory.matrices import explicit
    from theory.symbols import dim

    per_r, head = separate.conservation_rates()
    assert head == 0 or isinstance(head, sp.ZeroMatrix)
    for rate in per_r:  # 2 v k^T G q - 2 v q^T G^T k: zero as a 1 x 1 matrix
        assert sp.simplify(explicit(rate, dim(), 3)[0, 0]) == 0


def test_ansatz_value_weight_is_the_root_of_eq21():
    cf = _get("ansatz_value_weight")
    lam, T, N = 0.3, 1.0, 31
    v = cf(lam=lam, trLambda=T, N=N)
    a = theory.get("linear_attention.data.lambda_hat_sq_eigenvalue")(lam=lam, trLambda=T, N=N)
    assert v == pytest.approx((lam / a) ** (1 / 3), rel=1e-14)
    # the fixed point realised by this head reproduces the eigenvalue lambda/a of M_S (eq. 59)
    assert v**3 == pytest.approx(lam / a, rel=1e-13)


def test_pcr_limit_is_the_large_N_fixed_point():
    rng = np.random.default_rng(5)
    q, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    Lam = (q * np.array(FIG1)) @ q.T
    lim = _get("pcr_limit_matrix")(Lambda=Lam, m=2)
    M = _get("fixed_point_matrix")(Lambda=Lam, N=10**9, S=[1, 2])
    np.testing.assert_allclose(M, lim, rtol=1e-7, atol=1e-7)
    P = separate.projector(Lam, [1, 2])
    np.testing.assert_allclose(Lam @ lim, P, atol=1e-12)  # w^T P x_q in the limit (eq. 22)



# -- rank R (§5, App. F.3-F.4) -----------------------------------------------------------------
def test_rank_stationary_root_is_the_rank_one_root():
    from theory.linear_attention import merged

    assert sp.simplify(separate.rank_stationary_root() - merged.converged_eigenvalue()) == 0


@pytest.mark.parametrize("R", [1, 2, 3, 4])
def test_rank_fixed_points_are_the_rank_one_functions(R):
    from verify.flows import separate as fs

    rng = np.random.default_rng(11)
    q, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    Lam = (q * np.array(FIG1)) @ q.T
    V = separate.eigenvectors_descending(Lam)
    for k in range(5):
        for S in itertools.combinations(range(1, 5), k):
            M = _get("rank_fixed_point_matrix")(Lambda=Lam, N=7, S=list(S), R=R)
            np.testing.assert_allclose(M, _get("fixed_point_matrix")(Lambda=Lam, N=7, S=list(S)),
                                       rtol=1e-13, atol=1e-13)
            # realised by ceil(|S|/R) heads of rank R with a shared v_i = 1 (eq. 86): zero gradient
            H = max(1, -(-len(S) // R))
            v, kk = np.zeros(H), np.zeros((H, R, 4))
            for j, d in enumerate(S):
                v[j // R] = 1.0
                kk[j // R, j % R] = np.sqrt(V[:, d - 1] @ M @ V[:, d - 1]) * V[:, d - 1]
            np.testing.assert_allclose(fs.effective_matrix(v, kk, kk), M, atol=1e-12)
            grads = fs.gradients(Lam, 7, v, kk, kk)
            assert max(float(np.max(np.abs(g))) for g in grads) < 1e-13


def test_conspicuous_plateaus_are_the_saddles_at_multiples_of_R():
    cf = _get("conspicuous_plateau_loss")
    assert cf.status == "heuristic"
    assert "divides R" in cf.doc
    for R in (1, 2, 3, 4):
        for j in range(-(-4 // R)):
            assert cf(Lambda=FIG1, N=31, R=R, j=j) == pytest.approx(
                _get("saddle_loss")(Lambda=FIG1, N=31, m=j * R), rel=1e-14)
    # hand values: R = 2 plateaus at L(M_0) = 1 and L(M_2) = 0.377372
    assert cf(Lambda=FIG1, N=31, R=2, j=1) == pytest.approx(0.377372, abs=5e-7)


@pytest.mark.parametrize("kw, name", [({"R": 5, "j": 0}, "R"), ({"R": 2, "j": 2}, "j"),
                                      ({"R": 3, "j": 2}, "j"), ({"R": 1, "j": -1}, "j"),
                                      ({"R": 0, "j": 0}, "R")])
def test_conspicuous_plateau_rejects_bad_input(kw, name):
    with pytest.raises(ValueError, match=f"^{name}:"):
        _get("conspicuous_plateau_loss")(Lambda=FIG1, N=31, **kw)


def test_rank_fixed_point_rejects_rank_above_D():
    with pytest.raises(ValueError, match="^R:"):
        _get("rank_fixed_point_matrix")(Lambda=FIG1, N=31, S=[1], R=5)


def test_mpmath_projector_records_are_high_precision():
    """The eigen-projector of the mpmath backend is computed at the working precision: the
    value at 50 digits agrees with the one at 80 digits to about 50 digits (with a float64
    projector both would carry the same ~1e-16 error), and the gradient at a fixed point
    with every direction learned is zero to the working precision."""
    import mpmath

    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    Lam = (q * np.array([1e6, 1e2, 1e-2, 1e-6])) @ q.T
    Lam = (Lam + Lam.T) / 2
    r = theory.get("linear_attention.separate.subset_loss")
    with mpmath.workdps(50):
        v50 = r("mpmath", Lambda=Lam, S=[1], N=7)
    with mpmath.workdps(80):
        v80 = r("mpmath", Lambda=Lam, S=[1], N=7)
        assert abs(v50 - v80) / abs(v80) < mpmath.mpf(10) ** -45
    L3 = Lam[:3, :3] @ Lam[:3, :3].T + np.eye(3)
    with mpmath.workdps(50):
        g = theory.get("linear_attention.separate.fixed_point_gradient")("mpmath", Lambda=L3, S=[1, 2, 3], N=5)
        scale = mpmath.mpf(float(np.abs(L3 @ L3).max()))
        assert max(abs(x) for x in g) < scale * mpmath.mpf(10) ** -45


def test_min_norm_cost_is_three_alpha_two_thirds_and_the_lemma_weights_reach_it():
    from theory.linear_attention import sym

    alpha = sym("alpha")
    assert sp.simplify(separate.derive_min_norm_cost() - 3 * alpha ** sp.Rational(2, 3)) == 0
    cost = theory.get("linear_attention.separate.min_norm_cost")
    a = 0.37
    v = a ** (1 / 3)                      # k = q = v e: v k q^T = v^3 e e^T
    assert np.isclose(float(cost(alpha=a)), 3 * v**2, rtol=1e-14)
    # any other split of v k q = alpha costs more (AM-GM)
    for v2, k2 in ((0.5, 0.9), (1.2, 0.4)):
        q2 = a / (v2 * k2)
        assert v2**2 + k2**2 + q2**2 > float(cost(alpha=a))


def test_plateau_duration_is_the_escape_time_from_the_previous_drop():
    lam = np.diag([0.4, 0.3, 0.2, 0.1])
    dur = theory.get("linear_attention.separate.plateau_duration")
    esc = theory.get("linear_attention.separate.escape_time")
    for m in (1, 3):
        assert np.isclose(float(dur(Lambda=lam, m=m, tau=2.0, v=0.01)),
                          float(esc(Lambda=lam, N=31, m=m, tau=2.0, w_init=0.01)), rtol=1e-14)
        assert np.isclose(float(dur(Lambda=lam, m=m, tau=1.0, v=0.01)), 1 / (lam[m - 1, m - 1] ** 2 * 0.01))
