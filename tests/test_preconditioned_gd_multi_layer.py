"""The multi-layer closed forms of Ahn, Cheng, Daneshmand, Sra 2023 (Theorems 2-4): Wishart
moments (loop equations, white and correlated), the loss on S = {A_l = a_l Sigma^{-1}} at any
depth, the optimal steps and losses, the gradient scales, the two-layer optimum, plain GD at a
general Sigma, GD++ up to three layers and its optimum.

Reference values are independent of the code under test: hand-computed tables,
chi-square moments, the Wick-matching enumeration, the Isserlis engine of :mod:`theory.gaussian`,
exact Hankel systems in sympy, numpy root finding and finite differences.
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
from theory.preconditioned_gd.wishart import exact_moments, matching_counts, normalized_moment, trace_moment

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


@pytest.mark.parametrize("k", [*range(1, 8), 12, 17])
def test_trace_moments_at_d1_are_chi_square_moments(k):
    """d = 1: W = chi^2_n, E W^k = n (n + 2) ... (n + 2k - 2)."""
    chi2 = sp.Mul(*[n_ + 2 * j for j in range(k)])
    assert sp.expand(trace_moment(k, n_, 1) - chi2) == 0


@pytest.mark.parametrize("k", range(1, 8))
def test_loop_equations_equal_the_wick_matching_count(k):
    """The loop equations (memoised over partitions) against the enumeration of the (2k - 1)!!
    Wick matchings, the former derivation (k = 7: 135135 matchings)."""
    counted = sp.Add(*[c * d_**r * n_**s for (r, s), c in matching_counts(k).items()])
    assert sp.expand(trace_moment(k, n_, d_) - counted) == 0


def test_multi_trace_moments():
    """tr W ~ chi^2_{nd}: E (tr W)^2 = nd (nd + 2), E (tr W)^3 = nd (nd + 2)(nd + 4); and the
    symmetry n <-> d of every E prod tr W^{k_i} (tr (G G^T)^k = tr (G^T G)^k) at total degree 8."""
    from sympy.utilities.iterables import partitions

    from theory.preconditioned_gd.wishart import multi_trace_moment

    nd = n_ * d_
    assert sp.expand(multi_trace_moment((1, 1), n_, d_) - nd * (nd + 2)) == 0
    assert sp.expand(multi_trace_moment((1, 1, 1), n_, d_) - nd * (nd + 2) * (nd + 4)) == 0
    for p in partitions(8):
        parts = tuple(k for k, m in p.items() for _ in range(m))
        e = multi_trace_moment(parts, n_, d_)
        assert sp.expand(e - e.subs({n_: d_, d_: n_}, simultaneous=True)) == 0, parts
    assert multi_trace_moment((3, 2), 7, 4) == multi_trace_moment((3, 2), n_, d_).subs({n_: 7, d_: 4})


def test_trace_moment_record_any_k():
    """The record of m_k for any k: the chi-square moments at d = 1 (k = 20), the table at k <= 6,
    exact in mpmath (k = 24, n = 3, d = 2 against the polynomial; k = 30 costs 18 s of sympy), and the bounds of k."""
    rec = theory.get("preconditioned_gd.wishart.trace_moment")
    k = 20
    assert rec(n=9, d=1, k=k) == pytest.approx(float(prod(Fraction(9 + 2 * j, 9) for j in range(k))), rel=1e-15)
    assert [rec(n=20, d=5, k=j) for j in range(1, 7)] == pytest.approx(_cf(MOMENTS, n=20, d=5), rel=1e-15)
    assert rec(n=20, d=5, k=0) == 5.0
    with mpmath.workdps(60):
        exact = sp.Rational(trace_moment(24, n_, d_).subs({n_: 3, d_: 2}), 3**24)
        assert abs(rec("mpmath", n=3, d=2, k=24) - mpmath.mpf(exact.p) / exact.q) <= mpmath.mpf(10) ** -50 * exact
    with pytest.raises(ValueError, match="^k: "):
        rec(n=3, d=2, k=49)
    assert rec(n=1, d=2**53, k=30) == float("inf")  # beyond float64: inf, as numpy would give


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
@given(n=st.integers(1, 60), d=st.integers(1, 12), a=st.lists(STEP, min_size=1, max_size=6))
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
    """A layer with a_l = 0 is the identity: the L-layer loss with a zero step is the (L - 1)-layer loss
    (each evaluated on its own Gauss rule)."""
    kw = dict(n=7, d=4)
    f1 = _cf(LOSS, a=[0.6], **kw)
    assert _cf(LOSS, a=[0.6, 0.0], **kw) == pytest.approx(f1, rel=1e-14)
    assert _cf(LOSS, a=[0.0, 0.6, 0.0, 0.0], **kw) == pytest.approx(f1, rel=1e-14)
    assert _cf(LOSS, a=[0.3, 0.0, 1.1], **kw) == pytest.approx(_cf(LOSS, a=[0.3, 1.1], **kw), rel=1e-14)
    assert _cf(LOSS, a=[0.0], **kw) == pytest.approx(4.0, rel=1e-15)  # no step: E y_q^2 = d


@pytest.mark.parametrize("L", [1, 2, 3, 4])
def test_gauss_rule_loss_equals_the_moment_polynomial(L):
    """The record (Gauss rule of the expected spectral measure) against the polynomial
    sum_{j,k} c_j c_k m_{j+k} of the symbolic moments, exactly at rational steps (mpmath, 50 digits),
    and the L-step polynomial with a_{L-1} = 0 is the (L-1)-step one."""
    a = [sp.Rational(3, 10), sp.Rational(9, 10), sp.Rational(1, 2), sp.Rational(6, 5)][:L]
    at = {ml._sym("n"): 11, ml._sym("d"): 3, **{ml._sym(f"a_{l}"): a[l] for l in range(L)}}
    exact = sp.Rational(ml.loss_polynomial(L).subs(at))
    with mpmath.workdps(50):
        got = theory.get(LOSS)("mpmath", n=11, d=3, a=[str(x) for x in a])
        assert abs(got - mpmath.mpf(exact.p) / exact.q) <= mpmath.mpf(10) ** -45 * abs(got)
    if L > 1:
        last = ml._sym(f"a_{L - 1}")
        assert sp.expand(ml.loss_polynomial(L).subs(last, 0) - ml.loss_polynomial(L - 1)) == 0


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), d=st.integers(1, 8), a=st.lists(STEP, min_size=2, max_size=5),
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
SPEC_STEPS = {  # independent reference values of the optimal steps (L = 4: the kernel roots, below)
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


@pytest.mark.parametrize("L", [1, 2, 3, 4])
@pytest.mark.parametrize("n, d", [(1, 1), (2, 7), (20, 5), (50, 3)])
def test_kernel_coefficients_solve_the_hankel_system_exactly(L, n, d):
    at = {ml._sym("n"): n, ml._sym("d"): d}
    m = [sp.nsimplify(x.subs(at)) for x in ml.moments(2 * L)]
    c = sp.Matrix([x.subs(at) for x in ml.optimal_kernel(L)])
    H = sp.Matrix(L, L, lambda i, j: m[i + j + 2])
    g = sp.Matrix(L, 1, lambda i, j: m[i + 1])
    assert H * c + g == sp.zeros(L, 1)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), d=st.integers(1, 30), L=st.integers(1, 5))
def test_optimal_steps_are_the_sorted_roots_of_the_kernel_polynomial(n, d, L):
    """a_l are the roots of a^L + c_1 a^{L-1} + ... + c_L (numpy.roots of the Hankel solution)."""
    m = [float(x) for x in exact_moments(n, d, 2 * L)]
    H = np.array([[m[i + j + 2] for j in range(L)] for i in range(L)])
    c = -np.linalg.solve(H, m[1:L + 1])
    roots = np.sort(np.roots(np.concatenate([[1.0], c])).real)
    steps = _cf(STEPS, n=n, d=d, L=L)
    assert np.all(np.diff(steps) > 0) and np.all(steps > 0)
    assert np.allclose(steps, roots, rtol=1e-7 if L <= 3 else 1e-5)  # numpy's Hankel solve loses digits
    q = np.polyval(np.concatenate([[1.0], c]), steps)
    assert np.max(np.abs(q)) <= (1e-8 if L <= 3 else 1e-5) * max(1.0, np.max(np.abs(c)))


@pytest.mark.parametrize("n, d", [(20, 5), (3, 8), (200, 10)])
def test_gradient_scales_vanish_at_the_optimum_and_match_finite_differences(n, d):
    for L in (1, 2, 3, 4, 7):
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


@pytest.mark.parametrize("n, d, L", [(20, 5, 3), (7, 2, 2), (500, 40, 3), (1, 1, 3), (2, 1, 2), (20, 5, 4),
                                     (10**9, 3, 6), (3, 9, 12)])
def test_numpy_against_mpmath(n, d, L):
    for id in (STEPS, OPT_LOSS):
        value = np.atleast_1d(_cf(id, n=n, d=d, L=L))
        with mpmath.workdps(50):
            ref = np.atleast_1d(np.array([float(x) for x in np.atleast_1d(
                theory.get(id)("mpmath", n=n, d=d, L=L))]))
        assert np.allclose(value, ref, rtol=1e-11, atol=0)
    a = [0.2, 1.4, 0.7, 0.9, 1.1, 0.3, 0.5, 1.0, 0.8, 1.2, 0.6, 0.4][:L]
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
    ("L = 13", STEPS, dict(n=5, d=2, L=13), "L"),
    ("L = 0", OPT_LOSS, dict(n=5, d=2, L=0), "L"),
    ("no steps", LOSS, dict(n=5, d=2, a=[]), "a"),
    ("thirteen steps", LOSS, dict(n=5, d=2, a=[0.1] * 13), "a"),
    ("GD L = 6", "preconditioned_gd.multi_layer.gd_loss", dict(Sigma=[1.0, 2.0], n=5, eta=0.1, L=6), "L"),
    ("GD++ four layers", "preconditioned_gd.gdpp.loss", dict(n=5, d=2, a=[-0.1] * 4, b=[0.1] * 4), "a"),
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


# -- any depth: L = 4 against independent exact solutions ----------------------------------------
@pytest.mark.parametrize("n, d", [(20, 5), (10, 5), (4, 3)])
def test_four_layers_against_the_exact_hankel_solution(n, d):
    """L = 4 (Fig. 7's deepest point): the optimal loss is d - g^T H^{-1} g solved exactly in sympy
    rationals from the moments (k <= 8; the moments themselves are tested above against the matching
    counts, k <= 7, and the chi-square moments), the steps are the reciprocal roots of the kernel
    polynomial found by mpmath at 60 digits, and the loss record at those steps is the optimum: the
    Jacobi-matrix and Christoffel-function path of the records against the Hankel solve.
    n = 20, d = 5: f*_4 = 0.0549526, steps 0.362057, 0.520499, 0.888982, 2.138845."""
    L = 4
    m = [sp.Rational(x.numerator, x.denominator) for x in exact_moments(n, d, 2 * L)]
    H = sp.Matrix(L, L, lambda i, j: m[i + j + 2])
    g = sp.Matrix(L, 1, lambda i, j: m[i + 1])
    c = -H.LUsolve(g)
    f_star = m[0] - (g.T * H.LUsolve(g))[0, 0]
    with mpmath.workdps(60):
        roots = sorted(1 / mpmath.re(r) for r in mpmath.polyroots([mpmath.mpf(x.p) / x.q for x in reversed(list(c))]
                                                                  + [1], maxsteps=400, extraprec=200))
    assert _cf(OPT_LOSS, n=n, d=d, L=L) == pytest.approx(float(f_star), rel=1e-14)
    steps = _cf(STEPS, n=n, d=d, L=L)
    assert np.allclose(steps, [float(r) for r in roots], rtol=1e-13)
    assert _cf(LOSS, n=n, d=d, a=steps) == pytest.approx(float(f_star), rel=1e-11)
    if (n, d) == (20, 5):
        assert float(f_star) == pytest.approx(0.0549526, abs=5e-8)
        assert np.allclose(steps, [0.362057, 0.520499, 0.888982, 2.138845], atol=6e-7)


def test_optimal_loss_is_decreasing_in_depth_and_exact():
    """f*_L decreases with L and is the Christoffel function: an exact fraction (L = 1..12 at n = 20,
    d = 5), equal to the symbolic Schur-complement form for L <= 4."""
    from theory.preconditioned_gd.spectral_measure import christoffel_at_zero

    vals = [_cf(OPT_LOSS, n=20, d=5, L=L) for L in range(1, 13)]
    assert all(b < a for a, b in zip(vals, vals[1:]))
    for L in range(1, 5):
        sym_value = ml.derive_optimal_loss_of(L).subs({ml._sym("n"): 20, ml._sym("d"): 5})
        c = christoffel_at_zero(20, 5, L)
        assert sp.Rational(c.numerator, c.denominator) == sym_value


# -- plain GD at a general Sigma ------------------------------------------------------------------------
GD_LOSS, GD_STEP, GD_OPT = ("preconditioned_gd.multi_layer.gd_loss", "preconditioned_gd.multi_layer.gd_optimal_step",
                            "preconditioned_gd.multi_layer.gd_optimal_loss")
PAPER_SIGMA = [1.0, 1.0, 0.25, 0.0625, 1.0]


@pytest.mark.parametrize("n", [1, 7, 20])
def test_gd_one_step_by_hand(n):
    """L = 1: f = d - 2 eta tr Sigma + eta^2 (n + d + 1)/n tr Sigma^2 (E[S Sigma^{-1} S] = (n + d + 1)/n Sigma),
    eta* = n tr Sigma / ((n + d + 1) tr Sigma^2)."""
    lam = np.array([2.0, 0.5, 0.3])
    d, p1, p2 = 3, lam.sum(), (lam**2).sum()
    for eta in (0.1, 0.7, -0.3):
        assert _cf(GD_LOSS, Sigma=lam, n=n, eta=eta, L=1) == pytest.approx(
            d - 2 * eta * p1 + eta**2 * (n + d + 1) / n * p2, rel=1e-14)
    assert _cf(GD_STEP, Sigma=lam, n=n, L=1) == pytest.approx(n * p1 / ((n + d + 1) * p2), rel=1e-14)


@pytest.mark.parametrize("L", [1, 2, 3, 4])
def test_gd_at_identity_is_the_loss_on_S_with_equal_steps(L):
    """Sigma = I: plain GD is Sigma^{-1}-preconditioned GD, the loss on S with every step eta."""
    for eta in (0.3, 0.8, 1.3):
        assert _cf(GD_LOSS, Sigma=[1.0] * 5, n=20, eta=eta, L=L) == pytest.approx(
            _cf(LOSS, n=20, d=5, a=[eta] * L), rel=1e-12)


def test_gd_loss_by_the_isserlis_engine():
    """The correlated-Wishart loop equations against the Isserlis engine of theory.gaussian at a concrete
    2 x 2 Sigma: E tr(Sigma S Sigma^{-1} S S) (a word of the two-step loss) and E tr(S^3)."""
    from theory.gaussian import Gaussian, SampleCovariance, expectation
    from theory.preconditioned_gd.correlated_wishart import evaluate_terms, word_moment

    Sig = sp.ImmutableMatrix([[2, 1], [1, 3]])
    N = sp.Symbol("N", positive=True, integer=True)
    x = Gaussian("x", Sig)
    lam = list(Sig.eigenvals(multiple=True))
    traces = {c: sp.nsimplify(sp.expand(sum(v**c for v in lam))) for c in range(-2, 8)}
    for word, factors in [((1, -1, 0), [Sig, SampleCovariance(x, N), Sig.inv()] + [SampleCovariance(x, N)] * 2),
                          ((0, 0, 0), [SampleCovariance(x, N)] * 3)]:
        e = expectation(*factors)
        engine = sp.simplify(sp.Trace(e).doit())
        poly = word_moment([word])
        assert sp.simplify(evaluate_terms(poly, N, traces) / N**len(word) - engine) == 0, word


def test_gd_optimal_step_is_the_minimiser():
    """At the paper's spectrum (n = 20): f'(eta*) = 0 (finite differences), f(eta*) below f at 0.9 eta*
    and 1.1 eta*, and the optimal loss is f(eta*); plain GD is worse than the optimal-step PGD."""
    for L in (1, 2, 3, 4):
        eta = _cf(GD_STEP, Sigma=PAPER_SIGMA, n=20, L=L)
        f = _cf(GD_OPT, Sigma=PAPER_SIGMA, n=20, L=L)
        h = 1e-6
        fd = (_cf(GD_LOSS, Sigma=PAPER_SIGMA, n=20, eta=eta + h, L=L)
              - _cf(GD_LOSS, Sigma=PAPER_SIGMA, n=20, eta=eta - h, L=L)) / (2 * h)
        assert abs(fd) <= 1e-7
        assert f == pytest.approx(_cf(GD_LOSS, Sigma=PAPER_SIGMA, n=20, eta=eta, L=L), rel=1e-15)
        for r in (0.9, 1.1):
            assert _cf(GD_LOSS, Sigma=PAPER_SIGMA, n=20, eta=r * eta, L=L) > f
        assert f > _cf(OPT_LOSS, n=20, d=5, L=L)


def test_gd_loss_is_rotation_invariant_and_vectorised():
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    Sigma = q @ np.diag(PAPER_SIGMA) @ q.T
    etas = np.array([0.2, 0.5, 0.9])
    got = _cf(GD_LOSS, Sigma=Sigma, n=20, eta=etas, L=3)
    assert np.allclose(got, [_cf(GD_LOSS, Sigma=PAPER_SIGMA, n=20, eta=e, L=3) for e in etas], rtol=1e-12)


# -- GD++ ---------------------------------------------------------------------------------------------------
GDPP_OPT, GDPP_PAR = "preconditioned_gd.gdpp.optimal_loss", "preconditioned_gd.gdpp.optimal_parameters"


def test_gdpp_two_layers_equals_the_symbolic_polynomial():
    """The Gauss rule (5 nodes) against the L = 2 polynomial over m_0..m_8, at rational points (50 digits)."""
    from theory.preconditioned_gd.gdpp import loss_polynomial

    a, b = [sp.Rational(-1, 2), sp.Rational(-7, 2)], [sp.Rational(4, 5), sp.Rational(1, 3)]
    at = {ml._sym("n"): 20, ml._sym("d"): 5, ml._sym("a_0"): a[0], ml._sym("a_1"): a[1], ml._sym("b_0"): b[0]}
    exact = sp.Rational(loss_polynomial(2).subs(at))
    with mpmath.workdps(50):
        got = theory.get(GDPP)("mpmath", n=20, d=5, a=[str(x) for x in a], b=[str(x) for x in b])
        assert abs(got - mpmath.mpf(exact.p) / exact.q) <= mpmath.mpf(10) ** -45 * got


def test_gdpp_three_layers_equals_the_moment_sum():
    """L = 3 (r^2 of degree 26): the 14-node Gauss rule against sum_j e_j m_j with the exact moments."""
    from theory.preconditioned_gd.gdpp import gdpp_residual

    s = sp.Symbol("s")
    a = [sp.Rational(-34, 100), sp.Rational(-209, 100), sp.Rational(-857, 100)]
    b = [sp.Rational(88, 100), sp.Rational(58, 100)]
    poly = sp.Poly(sp.expand(gdpp_residual(a, b, s) ** 2), s)
    m = exact_moments(20, 5, poly.degree())
    exact = sum(sp.Rational(c) * sp.Rational(m[k].numerator, m[k].denominator) for (k,), c in poly.terms())
    with mpmath.workdps(50):
        got = theory.get(GDPP)("mpmath", n=20, d=5, a=[str(x) for x in a], b=[str(x) for x in b] + ["0"])
        assert abs(got - mpmath.mpf(exact.p) / exact.q) <= mpmath.mpf(10) ** -40 * got
    assert _cf(GDPP, n=20, d=5, a=[float(x) for x in a], b=[float(x) for x in b] + [0.0]) == pytest.approx(
        float(exact), rel=1e-12)


@pytest.mark.parametrize("n, f_ref, theta_ref", [
    (20, 9.613107e-4, (-0.33830, -2.09084, -8.56806, 0.87758, 0.57816)),
    (10, 0.0392593, (-0.53899, -1.57036, -11.78100, 0.29698, 0.94821)),
])
def test_gdpp_three_layer_optimum(n, f_ref, theta_ref):
    """The registered L = 3 optimum at d = 5 (n = 20: the authors' code; n = 10: the paper's §5.1): its
    value (against the best of 400 random BFGS starts), a critical point of the exact loss (gradient
    below 1e-9 of the loss scale) with a positive definite Hessian (finite differences of the exact
    gradient: a strict local minimum, Footnote 3's infimum attained), and the paper's observations:
    |a_0| <= |a_1| <= |a_2| (observation 2, Fig. 5) and a_l b_l < 0 (observation 1)."""
    from theory.preconditioned_gd.gdpp import gdpp_loss_gradient

    f = _cf(GDPP_OPT, n=n, d=5, L=3)
    theta = _cf(GDPP_PAR, n=n, d=5, L=3)
    assert f == pytest.approx(f_ref, rel=1e-6)
    assert np.allclose(theta, theta_ref, atol=2e-5)
    value, grad = gdpp_loss_gradient(n, 5, theta, 3)
    assert value == pytest.approx(f, rel=1e-12)
    assert np.max(np.abs(grad)) <= 1e-9 * max(1.0, value) or np.max(np.abs(grad)) <= 1e-10
    h = 1e-5
    H = np.array([(gdpp_loss_gradient(n, 5, theta + h * e, 3)[1] - gdpp_loss_gradient(n, 5, theta - h * e, 3)[1])
                  / (2 * h) for e in np.eye(5)])
    assert np.min(np.linalg.eigvalsh((H + H.T) / 2)) > 0
    a, b = theta[:3], theta[3:]
    assert abs(a[0]) <= abs(a[1]) <= abs(a[2])
    assert np.all(a[:2] * b < 0)
    # the record's loss at the optimum (b_{L-1} arbitrary)
    assert _cf(GDPP, n=n, d=5, a=a, b=[*b, 7.0]) == pytest.approx(f, rel=1e-12)


def test_gdpp_optimum_beats_the_sparse_optimum_and_two_layers():
    """One GD++ layer is the sparse layer (f* = d(d+1)/(n+d+1)); more layers help, and GD++ beats plain
    preconditioned GD at the same depth (L = 2, 3 at n = 20, d = 5)."""
    assert _cf(GDPP_OPT, n=20, d=5, L=1) == pytest.approx(30 / 26, rel=1e-10)
    for L in (2, 3):
        assert _cf(GDPP_OPT, n=20, d=5, L=L) < _cf(OPT_LOSS, n=20, d=5, L=L)
    assert _cf(GDPP_OPT, n=20, d=5, L=3) < _cf(GDPP_OPT, n=20, d=5, L=2) < _cf(GDPP_OPT, n=20, d=5, L=1)


def test_predict_gram_equals_the_forward_pass():
    """The Gram recursion of the Monte Carlo helpers is the transformer's forward pass (eqs. 2-4):
    sparse (eq. 8), GD++ (eq. 11) and dense random layers, L = 1..4."""
    from verify.models.linear_transformer import general_layers, predict, sparse_layers
    from verify.models.linear_transformer_monte_carlo import context_gram, predict_gram

    rng = np.random.default_rng(3)
    d, n, B = 4, 7, 50
    Z = rng.standard_normal((B, d + 1, n + 1))
    Z[:, d, n] = 0.0
    for L in (1, 2, 3, 4):
        A, Bm = rng.standard_normal((L, d, d)) * 0.3, rng.standard_normal((L, d, d)) * 0.3
        for P, Q in (sparse_layers(A), general_layers(A, Bm),
                     tuple(rng.standard_normal((2, L, d + 1, d + 1)) * 0.3)):
            want = predict(Z, P, Q)
            assert np.max(np.abs(predict_gram(Z, P, Q) - want)) <= 1e-12 * (1 + np.max(np.abs(want)))
            assert np.array_equal(predict_gram(context_gram(Z), P, Q), predict_gram(Z, P, Q))


def test_prompts_gram_is_the_tokens_gram():
    """``Prompts.gram`` (from S and w*, no token matrix) is the context Gram matrix and query column of the
    tokens (eq. 1), and ``target`` the query label, for both tasks; the forward pass on it is the same."""
    from verify.models.linear_transformer import predict, sparse_layers
    from verify.models.linear_transformer_monte_carlo import context_gram, predict_gram
    from verify.tasks.preconditioned_gd import distorted_covariance, sample_prompts

    rng = np.random.default_rng(5)
    Sigma = distorted_covariance(rng)
    for task in ("identity", "inverse"):
        pr = sample_prompts(rng, Sigma, 7, 40, task=task)
        assert np.allclose(pr.target, pr.y[:, -1], rtol=0, atol=1e-13)
        G, zq = pr.gram()
        G_tok, zq_tok = context_gram(pr.tokens())
        assert np.allclose(G, G_tok, rtol=1e-13, atol=1e-13) and np.array_equal(zq, zq_tok)
        P, Q = sparse_layers(rng.standard_normal((3, 5, 5)) * 0.3)
        want = predict(pr.tokens(), P, Q)
        assert np.max(np.abs(predict_gram(pr.gram(), P, Q) - want)) <= 1e-12 * (1 + np.max(np.abs(want)))


def test_predict_query_equals_the_forward_pass():
    """The query-column-only last layer is the forward pass (eqs. 2-4), linear and ReLU attention (§6),
    L = 1..3, dense random layers."""
    from verify.models.linear_transformer import predict
    from verify.models.linear_transformer_monte_carlo import predict_query

    rng = np.random.default_rng(4)
    d, n, B = 3, 6, 40
    Z = rng.standard_normal((B, d + 1, n + 1))
    Z[:, d, n] = 0.0
    for L in (1, 2, 3):
        P, Q = rng.standard_normal((2, L, d + 1, d + 1)) * 0.4
        for act in (None, "relu"):
            want = predict(Z, P, Q, activation=act)
            assert np.max(np.abs(predict_query(Z, P, Q, activation=act) - want)) <= 1e-12 * (1 + np.max(np.abs(want)))
    with pytest.raises(ValueError, match="activation"):
        predict_query(Z, P[:1], Q[:1], activation="tanh")


def test_trace_powers_are_the_eigenvalue_power_sums():
    """``trace_powers`` (Frobenius products of matrix powers) is ``sum_j s_j^k`` over the eigenvalues, k = 1..K,
    for odd and even K; ``white_wishart`` draws m x m matrices, m = min(n, d), of mean I when n >= d."""
    from verify.checks.preconditioned_gd.wishart import trace_powers, white_wishart

    rng = np.random.default_rng(7)
    for (n, d), K in (((4, 3), 8), ((20, 5), 7), ((2, 6), 5)):
        M = white_wishart(rng, n, d, 200)
        assert M.shape == (200, min(n, d), min(n, d))
        s = np.linalg.eigvalsh(M)
        want = np.stack([np.sum(s**k, axis=1) for k in range(1, K + 1)], axis=1)
        np.testing.assert_allclose(trace_powers(M, K), want, rtol=1e-12)
    big = white_wishart(rng, 20, 5, 20000)
    np.testing.assert_allclose(big.mean(axis=0), np.eye(5), atol=0.05)
