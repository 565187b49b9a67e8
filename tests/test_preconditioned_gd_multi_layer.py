"""The multi-layer closed forms of Ahn, Cheng, Daneshmand, Sra 2023 (Theorems 2-3): Wishart
moments, the loss on S = {A_l = a_l Sigma^{-1}}, the optimal steps and losses, the gradient
scales, the two-layer optimum.

Reference values are independent of the code under test: hand-computed tables,
chi-square moments, the Isserlis engine of :mod:`theory.gaussian`, and numpy root finding.
"""

from fractions import Fraction
from math import prod

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from theory.preconditioned_gd import multi_layer as ml
from theory.preconditioned_gd.wishart import matching_counts, normalized_moment, trace_moment

MOMENTS = "preconditioned_gd.wishart.trace_moments"
LOSS = "preconditioned_gd.multi_layer.loss"
STEPS = "preconditioned_gd.multi_layer.optimal_steps"
OPT_LOSS = "preconditioned_gd.multi_layer.optimal_loss"
GRAD = "preconditioned_gd.multi_layer.gradient_scales"

n_, d_ = sp.symbols("n d")


def _cf(id, **kw):
    return theory.get(id)(**kw)


# -- Wishart moments ----------------------------------------------------------------------
SPEC_TABLE = {  # E tr W^k, W ~ W_d(n, I)
    1: n_ * d_,
    2: n_ * d_ * (n_ + d_ + 1),
    3: n_ * d_ * (n_**2 + d_**2 + 3 * n_ * d_ + 3 * n_ + 3 * d_ + 4),
    4: n_ * d_ * (n_**3 + d_**3 + 6 * n_**2 * d_ + 6 * n_ * d_**2 + 6 * n_**2 + 6 * d_**2 + 17 * n_ * d_
                  + 21 * n_ + 21 * d_ + 20),
    5: n_ * d_ * (d_**4 + 10 * d_**3 * n_ + 10 * d_**3 + 20 * d_**2 * n_**2 + 55 * d_**2 * n_ + 65 * d_**2
                  + 10 * d_ * n_**3 + 55 * d_ * n_**2 + 175 * d_ * n_ + 160 * d_ + n_**4 + 10 * n_**3
                  + 65 * n_**2 + 160 * n_ + 148),
    6: n_ * d_ * (d_**5 + 15 * d_**4 * n_ + 15 * d_**4 + 50 * d_**3 * n_**2 + 135 * d_**3 * n_
                  + 155 * d_**3 + 50 * d_**2 * n_**3 + 262 * d_**2 * n_**2 + 787 * d_**2 * n_ + 701 * d_**2
                  + 15 * d_ * n_**4 + 135 * d_ * n_**3 + 787 * d_ * n_**2 + 1827 * d_ * n_ + 1620 * d_
                  + n_**5 + 15 * n_**4 + 155 * n_**3 + 701 * n_**2 + 1620 * n_ + 1348),
}


@pytest.mark.parametrize("k", range(1, 7))
def test_trace_moments_match_spec_table(k):
    assert sp.expand(trace_moment(k, n_, d_) - SPEC_TABLE[k]) == 0


@pytest.mark.parametrize("k", range(1, 8))
def test_trace_moments_at_d1_are_chi_square_moments(k):
    """d = 1: W = chi^2_n, E W^k = n (n + 2) ... (n + 2k - 2)."""
    chi2 = sp.Mul(*[n_ + 2 * j for j in range(k)])
    assert sp.expand(trace_moment(k, n_, 1) - chi2) == 0


@pytest.mark.parametrize("k", range(1, 8))
def test_matching_counts_total_and_duality(k):
    """(2k - 1)!! matchings in all; E tr W^k is symmetric in (n, d) (tr (G G^T)^k = tr (G^T G)^k)."""
    counts = matching_counts(k)
    assert sum(counts.values()) == prod(range(1, 2 * k, 2))
    assert all(counts.get((c, r)) == v for (r, c), v in counts.items())


@pytest.mark.parametrize("k", range(1, 5))
def test_trace_moments_agree_with_the_isserlis_engine(k):
    """An independent derivation: theory.gaussian on the word S S ... S of sample covariances."""
    from theory.gaussian import Gaussian, SampleCovariance, expectation
    from theory.symbols import dim

    D, n = dim(), ml._sym("n")
    u = Gaussian("u", sp.Identity(D))
    e = expectation(*([SampleCovariance(u, n)] * k))
    engine = sp.Trace(e).doit() if getattr(e, "is_Matrix", False) else e
    assert sp.simplify(engine - normalized_moment(k, n, D)) == 0


def test_trace_moments_record():
    m = _cf(MOMENTS, n=20, d=5)
    assert np.allclose(m, [5, 6.5, 10.05, 17.45, 32.9265, 66.2607], rtol=1e-14)


# -- the loss on S ------------------------------------------------------------------------
STEP = st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60), d=st.integers(1, 12), a=st.lists(STEP, min_size=1, max_size=3))
def test_loss_is_nonnegative_and_at_least_the_optimum(n, d, a):
    f = _cf(LOSS, n=n, d=d, a=a)
    f_star = _cf(OPT_LOSS, n=n, d=d, L=len(a))
    assert f_star > 0
    assert f >= f_star * (1 - 1e-9)


@pytest.mark.parametrize("n, d", [(20, 5), (4, 3), (1, 1), (3, 9), (1000, 2)])
def test_one_layer_optimum_is_the_inverse_task_single_layer_loss(n, d):
    """L = 1: a* = n/(n+d+1), f* = d(d+1)/(n+d+1) (the inverse-task single-layer optimum)."""
    a_star = _cf(STEPS, n=n, d=d, L=1)
    assert a_star == pytest.approx([n / (n + d + 1)], rel=1e-14)
    expected = d * (d + 1) / (n + d + 1)
    assert _cf(OPT_LOSS, n=n, d=d, L=1) == pytest.approx(expected, rel=1e-13)
    assert _cf(LOSS, n=n, d=d, a=a_star) == pytest.approx(expected, rel=1e-12)


def test_zero_padding_is_an_identity_layer():
    """A layer with a_l = 0 is the identity, so the L = 3 polynomial padded with zeros is the
    L-layer loss."""
    kw = dict(n=7, d=4)
    f1 = _cf(LOSS, a=[0.6], **kw)
    assert _cf(LOSS, a=[0.6, 0.0], **kw) == f1 == _cf(LOSS, a=[0.0, 0.6, 0.0], **kw)
    assert _cf(LOSS, a=[0.3, 0.0, 1.1], **kw) == pytest.approx(_cf(LOSS, a=[0.3, 1.1], **kw), rel=1e-14)
    assert _cf(LOSS, a=[0.0], **kw) == pytest.approx(4.0, rel=1e-15)  # no step: E y_q^2 = d


def test_loss_symbolic_zero_padding():
    """Setting a_2 = 0 in the expression gives the two-layer polynomial exactly."""
    a0, a1, a2 = (ml._sym(f"a_{l}") for l in range(3))
    two = ml.spectral_loss(ml.kernel_coefficients([a0, a1]), ml.moments(4))
    assert sp.expand(ml.derive_loss().subs(a2, 0) - two) == 0


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), d=st.integers(1, 8), a=st.lists(STEP, min_size=2, max_size=3),
       seed=st.integers(0, 2**32 - 1))
def test_loss_is_invariant_under_permuting_the_steps(n, d, a, seed):
    """Lemma 4: on S the layers commute."""
    perm = list(np.random.default_rng(seed).permutation(a))
    f = _cf(LOSS, n=n, d=d, a=a)
    assert _cf(LOSS, n=n, d=d, a=perm) == pytest.approx(f, rel=1e-10, abs=1e-12)


def test_loss_at_one_layer_by_hand():
    """f(a) = d - 2 a m_1 + a^2 m_2 with m_1 = d, m_2 = d (n + d + 1)/n."""
    n, d, a = 9, 4, 0.37
    assert _cf(LOSS, n=n, d=d, a=[a]) == pytest.approx(d - 2 * a * d + a**2 * d * (n + d + 1) / n, rel=1e-14)


# -- optimal steps and losses ---------------------------------------------------------------
SPEC_STEPS = {  # independent reference values of the optimal steps
    (20, 5): {1: [10 / 13], 2: [0.515371, 1.249572], 3: [0.422409, 0.689126, 1.714217]},
    (10, 5): {1: [5 / 8], 2: [0.38689, 1.09959], 3: [0.300305, 0.528693, 1.64433]},
    (4, 3): {1: [1 / 2], 2: [0.27164, 0.84586], 3: [0.18778, 0.37635, 1.2572]},
}
SPEC_LOSS = {
    (20, 5): {1: Fraction(15, 13), 2: Fraction(1795, 4969), 3: Fraction(12138645, 90852389)},
    (10, 5): {1: Fraction(15, 8), 2: Fraction(970, 999), 3: Fraction(307915, 531468)},
    (4, 3): {1: Fraction(3, 2), 2: Fraction(393, 383), 3: 0.782715},
}


@pytest.mark.parametrize("n, d", list(SPEC_STEPS))
@pytest.mark.parametrize("L", [1, 2, 3])
def test_optimal_steps_and_loss_spec_table(n, d, L):
    steps = _cf(STEPS, n=n, d=d, L=L)
    expected = SPEC_STEPS[(n, d)][L]
    decimals = max(len(repr(x).split(".")[1]) for x in expected) if L > 1 else 12
    assert np.shape(steps) == (L,)
    assert np.allclose(steps, expected, rtol=0, atol=0.6 * 10.0**-decimals)
    ref = SPEC_LOSS[(n, d)][L]
    f_star = _cf(OPT_LOSS, n=n, d=d, L=L)
    if isinstance(ref, Fraction):
        assert f_star == pytest.approx(float(ref), rel=1e-13)
        assert sp.Rational(ref.numerator, ref.denominator) == ml.derive_optimal_loss_of(L).subs(
            {ml._sym("n"): n, ml._sym("d"): d})
    else:
        assert round(f_star, 6) == ref
    assert _cf(LOSS, n=n, d=d, a=steps) == pytest.approx(f_star, rel=1e-10)


def test_spec_kernel_polynomial_n20_d5():
    """p*(s) = 1 - 256726320/90852389 s + 6881300/3132841 s^2 - 45335000/90852389 s^3."""
    c = ml.optimal_kernel(3)
    at = {ml._sym("n"): 20, ml._sym("d"): 5}
    assert [x.subs(at) for x in c] == [sp.Rational(-256726320, 90852389), sp.Rational(6881300, 3132841),
                                      sp.Rational(-45335000, 90852389)]


@pytest.mark.parametrize("L", [1, 2, 3])
@pytest.mark.parametrize("n, d", [(1, 1), (2, 7), (20, 5), (50, 3)])
def test_kernel_coefficients_solve_the_hankel_system_exactly(L, n, d):
    at = {ml._sym("n"): n, ml._sym("d"): d}
    m = [sp.nsimplify(x.subs(at)) for x in ml.moments(2 * L)]
    c = sp.Matrix([x.subs(at) for x in ml.optimal_kernel(L)])
    H = sp.Matrix(L, L, lambda i, j: m[i + j + 2])
    g = sp.Matrix(L, 1, lambda i, j: m[i + 1])
    assert H * c + g == sp.zeros(L, 1)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), d=st.integers(1, 30), L=st.integers(1, 3))
def test_optimal_steps_are_the_sorted_roots_of_the_kernel_polynomial(n, d, L):
    """a_l are the roots of a^L + c_1 a^{L-1} + ... + c_L (numpy.roots of the Hankel solution)."""
    m = np.concatenate([[d], _cf(MOMENTS, n=n, d=d)])
    H = np.array([[m[i + j + 2] for j in range(L)] for i in range(L)])
    c = -np.linalg.solve(H, m[1:L + 1])
    roots = np.sort(np.roots(np.concatenate([[1.0], c])).real)
    steps = _cf(STEPS, n=n, d=d, L=L)
    assert np.all(np.diff(steps) > 0) and np.all(steps > 0)
    assert np.allclose(steps, roots, rtol=1e-7)
    q = np.polyval(np.concatenate([[1.0], c]), steps)
    assert np.max(np.abs(q)) <= 1e-8 * max(1.0, np.max(np.abs(c)))


@pytest.mark.parametrize("n, d", [(20, 5), (3, 8), (200, 10)])
def test_gradient_scales_vanish_at_the_optimum_and_match_finite_differences(n, d):
    for L in (1, 2, 3):
        a = _cf(STEPS, n=n, d=d, L=L)
        g = _cf(GRAD, n=n, d=d, a=a)
        assert np.shape(g) == (L,)
        assert np.max(np.abs(g)) <= 1e-9
    a = np.array([0.3, 0.9, 0.5])
    g = _cf(GRAD, n=n, d=d, a=a)
    h = 1e-6
    fd = [(_cf(LOSS, n=n, d=d, a=a + h * e) - _cf(LOSS, n=n, d=d, a=a - h * e)) / (2 * h) / d
          for e in np.eye(3)]
    assert np.allclose(g, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("n, d, L", [(20, 5, 3), (7, 2, 2), (500, 40, 3), (1, 1, 3), (2, 1, 2)])
def test_numpy_against_mpmath(n, d, L):
    for id in (STEPS, OPT_LOSS):
        value = np.atleast_1d(_cf(id, n=n, d=d, L=L))
        with mpmath.workdps(50):
            ref = np.atleast_1d(np.array([float(x) for x in np.atleast_1d(
                theory.get(id)("mpmath", n=n, d=d, L=L))]))
        assert np.allclose(value, ref, rtol=1e-11, atol=0)
    a = [0.2, 1.4, 0.7][:L]
    with mpmath.workdps(50):
        ref = float(theory.get(LOSS)("mpmath", n=n, d=d, a=a))
    assert _cf(LOSS, n=n, d=d, a=a) == pytest.approx(ref, rel=1e-11)


# -- Theorem 2 -----------------------------------------------------------------------------
def test_two_layer_steps_n20_d5():
    """a_0 + a_1 = 8770/4969, a_0 a_1 = 3200/4969, f*_2 = 1795/4969."""
    s = _cf("preconditioned_gd.two_layer.step_sum", n=20, d=5)
    p = _cf("preconditioned_gd.two_layer.step_product", n=20, d=5)
    assert s == pytest.approx(8770 / 4969, rel=1e-14)
    assert p == pytest.approx(3200 / 4969, rel=1e-14)
    assert _cf("preconditioned_gd.two_layer.optimal_loss", n=20, d=5) == pytest.approx(1795 / 4969, rel=1e-14)
    a = _cf(STEPS, n=20, d=5, L=2)
    assert a.sum() == pytest.approx(s, rel=1e-13) and a.prod() == pytest.approx(p, rel=1e-13)


# -- bad input -------------------------------------------------------------------------------
BAD = [
    ("L = 4", STEPS, dict(n=5, d=2, L=4), "L"),
    ("L = 0", OPT_LOSS, dict(n=5, d=2, L=0), "L"),
    ("no steps", LOSS, dict(n=5, d=2, a=[]), "a"),
    ("four steps", LOSS, dict(n=5, d=2, a=[0.1, 0.2, 0.3, 0.4]), "a"),
    ("NaN step", GRAD, dict(n=5, d=2, a=[float("nan")]), "a"),
    ("scalar step", LOSS, dict(n=5, d=2, a=0.5), "a"),
    ("n = 0", LOSS, dict(n=0, d=2, a=[0.5]), "n"),
    ("d = 1.5", MOMENTS, dict(n=3, d=1.5), "d"),
    ("missing L", STEPS, dict(n=3, d=2), "L"),
]


@pytest.mark.parametrize("case, id, kw, name", BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_the_parameter(case, id, kw, name):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        _cf(id, **kw)


# -- Theorem 4 (GD++) ------------------------------------------------------------------------
GDPP = "preconditioned_gd.gdpp.loss"


@pytest.mark.parametrize("n, d", [(20, 5), (3, 4)])
def test_gdpp_one_layer_is_the_eq8_layer_with_flipped_sign(n, d):
    """a_1 = 0 (zero padding): one GD++ layer with A_0 = a Sigma^{-1} is the eq.-8 layer with -a."""
    for a in (-0.7, 0.4):
        f = _cf(LOSS, n=n, d=d, a=[-a])
        assert _cf(GDPP, n=n, d=d, a=[a], b=[0.9]) == pytest.approx(f, rel=1e-13)
        assert _cf(GDPP, n=n, d=d, a=[a, 0.0], b=[0.9, 0.2]) == pytest.approx(f, rel=1e-13)


def test_gdpp_without_b_is_two_plain_gd_steps():
    """b_0 = 0: no covariate update, so two GD++ layers are two eq.-8 layers with -a_l."""
    f = _cf(LOSS, n=20, d=5, a=[0.4, 1.3])
    assert _cf(GDPP, n=20, d=5, a=[-0.4, -1.3], b=[0.0, 0.5]) == pytest.approx(f, rel=1e-13)


def test_gdpp_spec_optimum_region_beats_plain_gd():
    """GD++ reaches ~1e-3 at n = 20, d = 5 with 3 layers; already 2 layers with the
    curvature correction (a_0 b_0 < 0) beat the best plain 2-step GD (1795/4969)."""
    best_gd = _cf(OPT_LOSS, n=20, d=5, L=2)
    grid = [(_cf(GDPP, n=20, d=5, a=[a0, a1], b=[b0, 0.0]), a0, a1, b0)
            for a0 in np.linspace(-1.2, -0.2, 6) for a1 in np.linspace(-4.0, -0.5, 8) for b0 in (0.0, 0.3, 0.6, 0.9)]
    f, *_ = min(grid)
    assert 0 < f < best_gd


def test_gdpp_b_must_match_the_layers():
    with pytest.raises(ValueError, match=r"^b: "):
        _cf(GDPP, n=5, d=2, a=[-0.5], b=[0.3, 0.2])


# -- the two papers' single layer agree where the task models coincide (Sigma = I) -------
@settings(max_examples=25, deadline=None)
@given(a=st.floats(-1.0, 2.5), n=st.integers(1, 60), d=st.integers(1, 7))
def test_one_layer_loss_equals_the_single_layer_loss_at_identity_covariance(a, n, d):
    """At Sigma = I the inverse task (w* ~ N(0, Sigma^{-1})) is Theorem 1's task (w* ~ N(0, I)):
    the multi-layer polynomial at L = 1 equals the single-layer loss of Gamma = a I."""
    single = theory.get("preconditioned_gd.single_layer.loss")(Sigma=np.ones(d), n=n, A=a * np.eye(d))
    multi = theory.get("preconditioned_gd.multi_layer.loss")(n=n, d=d, a=[a])
    assert multi == pytest.approx(single, rel=1e-12, abs=1e-12)


def test_lemma1_is_a_polynomial_identity():
    """Lemma 1 proved (not sampled) at d = 2, n = 2, L = 2: with symbolic tokens, task vector
    and non-symmetric preconditioners, the sparse forward pass (eqs. 2-4, 8, mask, 1/n)
    equals two preconditioned-GD steps with A_l^T exactly, and not with A_l."""
    import sympy as sp

    d, n, L = 2, 2, 2
    X = sp.Matrix(d, n + 1, lambda i, j: sp.Symbol(f"x{i}{j}"))
    w = sp.Matrix(d, 1, lambda i, j: sp.Symbol(f"w{i}"))
    A = [sp.Matrix(d, d, lambda i, j, l=l: sp.Symbol(f"a{l}{i}{j}")) for l in range(L)]
    y = (w.T * X)
    Z = X.col_join(y)
    Z[d, n] = 0
    mask = sp.diag(*([1] * n + [0]))
    for Al in A:
        P = sp.zeros(d + 1, d + 1)
        P[d, d] = 1
        Q = sp.zeros(d + 1, d + 1)
        Q[:d, :d] = -Al
        Z = Z + P * Z * mask * (Z.T * Q * Z) / n
    tf = -Z[d, n]
    C = X[:, :n]
    S, h = C * C.T / n, C * y[:, :n].T / n
    xq = X[:, n]

    def gd(mats):
        v = sp.zeros(d, 1)
        for Al in mats:
            v = v - Al * (S * v - h)
        return (xq.T * v)[0, 0]

    assert sp.expand(tf - gd([Al.T for Al in A])) == 0
    assert sp.expand(tf - gd(A)) != 0


def test_gdpp_control_box_keeps_the_gradients_away_from_zero():
    """The random point of ``gdpp.mc_gradient_structure`` is drawn from GDPP_BOX so that its
    controls (grad_A proportional to I, grad_B_0 proportional to Sigma) are well separated:
    on a grid of the box the gradient scales stay away from 0 (g_B0 >= 0.067, max_l |g_A|
    >= 0.11 on the 9^3 grid; here a 4^3 grid, corners included)."""
    import itertools

    from verify.flows.gdpp import GDPP_BOX, gdpp_scales

    lo = np.r_[GDPP_BOX["a_low"], GDPP_BOX["b_low"][0]]
    hi = np.r_[GDPP_BOX["a_high"], GDPP_BOX["b_high"][0]]
    for t in itertools.product(np.linspace(0, 1, 4), repeat=3):
        a0, a1, b0 = lo + np.asarray(t) * (hi - lo)
        g_A, g_B0 = gdpp_scales(20, 5, [-a0, -a1], [b0, 0.5])
        assert g_B0 >= 0.06 and np.max(np.abs(g_A)) >= 0.1, (a0, a1, b0, g_A, g_B0)
    # the former box held a point where grad_B_0 vanishes (the wrong form held there)
    g_A, g_B0 = gdpp_scales(20, 5, [-0.766, -0.613], [0.86, 0.681])
    assert abs(g_B0) < 0.01
