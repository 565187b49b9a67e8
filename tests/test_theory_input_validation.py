"""Input validation and extreme-but-valid inputs of the closed forms (Python API).

* integers of 2**53 and more (2**64, 10**30, JSON 1e30, 10**400) for every index parameter of every
  record: ``ValueError`` naming the parameter and the bound, never a TypeError/OverflowError;
* empty, ragged and non-numeric arrays for every scalar parameter of every record, booleans
  inside lists, ``np.bool_``, ``np.datetime64``, strings, a JSON object as a subset;
* shapes of vectorised parameters that do not broadcast: ``ValueError`` naming the parameter;
* eq. 10 (``merged.sigma``) and eq. 51 (``merged.white_loss``) for w_init down to 1e-300, where
  w_init^2 underflows, against mpmath at 50 digits;
* Corollary 1 (``speed.convergence_steps``) out to epsilon = 1e-300, where E = e^{M h} overflows;
* the mpmath step budget of the h* recursion.
"""

import math

import mpmath
import numpy as np
import pytest

import theory
from theory.params import INDEX_MAX

RECORDS = theory.records()


def call_with(cf, name, value):
    kw = {p.name: p.example() for p in cf.params}
    kw[name] = value
    return cf(**kw)


def cases(kinds):
    return [pytest.param(cf, p.name, id=f"{cf.id}-{p.name}")
            for cf in RECORDS for p in cf.params if p.kind in kinds]


# -- huge integers -------------------------------------------------------------------------------
HUGE = [2**53 + 1, 2**64, 10**30, 1e30, 2.0**64, 10**400, -(10**400)]


@pytest.mark.parametrize("cf, name", cases(("index",)))
def test_huge_index_is_refused_naming_the_parameter_and_bound(cf, name):
    for value in HUGE:
        with pytest.raises(ValueError) as info:
            call_with(cf, name, value)
        message = str(info.value)
        assert message.startswith(f"{name}: must be "), message
        assert "2**53" in message or "<= " in message or ">= " in message, message


def test_index_bound_is_2_to_the_53():
    p = theory.get("linear_attention.merged.sigma").params[2]
    assert p.name == "D" and p.validate(INDEX_MAX, {}) == 2**53
    assert isinstance(p.validate(1e15, {}), int)
    with pytest.raises(ValueError, match=r"^D: must be <= 2\*\*53 = 9007199254740992 .*got 1.000e\+400"):
        p.validate(10**400, {})


def test_large_index_evaluates_in_float64():
    """An index below the bound reaches the numpy backend as a float64: T**3 at T = 2**32 would
    leave int64 (numpy then failed on the Python int)."""
    cf = theory.get("localization.rho.gaussian")
    kw = dict(i=1, T=2**32, trW=0.7, trW2=1.3, temperature=2.0)
    value = cf(**kw)
    with mpmath.workdps(50):
        reference = cf("mpmath", **kw)
    assert math.isfinite(value) and value == pytest.approx(float(reference), rel=1e-9, abs=1e-300)


def test_omega_0_at_large_vocabulary_matches_mpmath():
    """ln(M/(M-1)) as log1p(1/(M-1)): M/(M-1) rounds to 1 + 1 ulp at large M."""
    cf = theory.get("scan_snap.h.omega_0")
    for M in (10**9, 10**15, 2**53):
        with mpmath.workdps(50):
            reference = float(cf("mpmath", M=M))
        assert cf(M=M) == pytest.approx(reference, rel=1e-13)


# -- empty, ragged and non-numeric values ----------------------------------------------------------
EMPTY_OR_RAGGED = [[], [[]], [[], []], [[[]]], [[1.0, 2.0], [3.0]], [1.0, [2.0]], np.array([])]


@pytest.mark.parametrize("cf, name", cases(("positive", "nonnegative", "real")))
def test_empty_or_ragged_scalar_is_refused_naming_the_parameter(cf, name):
    for value in EMPTY_OR_RAGGED:
        with pytest.raises(ValueError, match=f"^{name}: "):
            call_with(cf, name, value)


NOT_NUMBERS = [None, True, np.bool_(True), "5", "NaN", {}, {"a": 1}, np.datetime64("2020-01-01"),
               np.timedelta64(3, "s"), [1.0, True], [0.5, None], [0.5, "1"], np.array([1.0, True],
                                                                                         dtype=object)]


@pytest.mark.parametrize("cf, name", cases(("positive", "nonnegative", "real", "covariance", "matrix",
                                             "vector", "steps", "index", "subset")))
def test_non_numbers_are_refused_naming_the_parameter(cf, name):
    for value in NOT_NUMBERS:
        with pytest.raises(ValueError, match=f"^{name}: "):
            call_with(cf, name, value)


@pytest.mark.parametrize("value", [np.bool_(True), True, np.datetime64(5, "D"), np.timedelta64(31),
                                   "31", np.array([31]), 31.5, [31]])
def test_index_refuses_non_integers(value):
    with pytest.raises(ValueError, match="^N: expected an integer"):
        theory.get("linear_attention.merged.sigma")(t=3.0, tau=1.0, D=4, N=value, w_init=0.01)


def test_index_accepts_integer_types():
    import torch

    sigma = theory.get("linear_attention.merged.sigma")
    expected = sigma(t=3.0, tau=1.0, D=4, N=31, w_init=0.01)
    for N in (np.int64(31), 31.0, np.float32(31.0), np.array(31), torch.tensor(31)):
        assert sigma(t=3.0, tau=1.0, D=4, N=N, w_init=0.01) == expected


@pytest.mark.parametrize("S", [{"3": 0}, {1: 2}, "12", 3, [True], [[1]], np.array([[1, 2]])])
def test_subset_refuses_objects_strings_and_nesting(S):
    with pytest.raises(ValueError, match="^S: "):
        theory.get("linear_attention.separate.subset_loss")(Lambda=[1.0, 0.5, 0.25], N=5, S=S)


@pytest.mark.parametrize("name, value", [("Lambda", [True, 0.5]), ("Lambda", [[1.0, False], [False, 1.0]])])
def test_booleans_inside_a_covariance_are_refused(name, value):
    with pytest.raises(ValueError, match=f"^{name}: .*boolean"):
        theory.get("linear_attention.data.lambda_hat_sq")(Lambda=value, N=5)


def test_booleans_inside_steps_vectors_and_matrices_are_refused():
    with pytest.raises(ValueError, match="^a: .*boolean"):
        theory.get("preconditioned_gd.multi_layer.loss")(n=5, d=3, a=[True, 0.5])
    with pytest.raises(ValueError, match="^mu: .*boolean"):
        theory.get("localization.gaussian.second_moment")(Sigma=[1.0, 0.5, 0.25], mu=[True, 0, 0])
    with pytest.raises(ValueError, match="^M: .*boolean"):
        theory.get("linear_attention.merged.loss")(Lambda=[1.0, 0.5], N=5, M=[[True, 0], [0, 1.0]])


# -- broadcasting ------------------------------------------------------------------------------------
def test_shapes_that_do_not_broadcast_name_the_parameter():
    sigma = theory.get("linear_attention.merged.sigma")
    with pytest.raises(ValueError, match=r"^tau: an array of shape \(3,\) does not broadcast with t \(2, 2\)"):
        sigma(t=[[1.0, 2.0], [3.0, 4.0]], tau=[1.0, 2.0, 3.0], D=4, N=31, w_init=0.01)
    assert sigma(t=np.ones((2, 1)), tau=np.ones((1, 3)), D=4, N=31, w_init=0.01).shape == (2, 3)
    with pytest.raises(ValueError, match="^kappa1: "):
        theory.get("localization.locater.grad_key")(W_Q=np.eye(2), W_K=np.eye(2), kappa1=[], kappa2=1.0)


@pytest.mark.parametrize("cf", [cf for cf in RECORDS
                                if sum(p.kind in ("positive", "nonnegative", "real") for p in cf.params) >= 2],
                         ids=lambda cf: cf.id)
def test_every_record_names_a_clashing_shape(cf):
    scalars = [p for p in cf.params if p.kind in ("positive", "nonnegative", "real")]
    kw = {p.name: p.example() for p in cf.params}
    kw[scalars[0].name] = np.full(2, scalars[0].example())
    kw[scalars[1].name] = np.full(3, scalars[1].example())
    with pytest.raises(ValueError, match=f"^{scalars[1].name}: an array of shape \\(3,\\) does not broadcast"):
        cf(**kw)


def test_mpmath_refuses_arrays_of_real_parameters():
    with pytest.raises(ValueError, match="^xi: the mpmath backend takes scalars"):
        theory.get("localization.rho.continuum")("mpmath", theta=0.5, xi=[0.1, 0.2], eta=0.8)


# -- eq. 10 and eq. 51 where w_init^2 underflows ----------------------------------------------------------
def mp50(cf_id, **kw):
    with mpmath.workdps(50):
        return theory.get(cf_id)("mpmath", **kw)


W_TINY = [1e-150, 1e-161, 1e-162, 1e-200, 1e-250, 1e-300, 5e-324]
T_OVER_TAU = [0.0, 1.0, 100.0, 345.0, 400.0, 690.0, 1e3, 1e6]


@pytest.mark.parametrize("w", W_TINY)
@pytest.mark.parametrize("name", ["sigma", "white_loss"])
def test_sigma_and_white_loss_for_tiny_w_init_match_mpmath(name, w):
    cf_id = "linear_attention.merged." + name
    for D, N in [(4, 31), (1, 1), (10**9, 10**9)]:
        for t in T_OVER_TAU:
            kw = dict(t=2.5 * t, tau=2.5, D=D, N=N, w_init=w)
            value = theory.get(cf_id)(**kw)
            reference = mp50(cf_id, **kw)
            assert math.isfinite(value), (kw, value)
            # relative 1e-12, or absolute below the smallest normal float (sigma ~ w^2 at t = 0)
            assert abs(value - float(reference)) <= 1e-12 * abs(float(reference)) + 1e-307, (kw, value, reference)


def test_sigma_at_tiny_w_init_and_large_t():
    """t = 400 tau, w_init = 1e-300: the value had been NaN; mpmath gives 0.8611 = 31/36."""
    kw = dict(t=400.0, tau=1.0, D=4, N=31, w_init=1e-300)
    assert theory.get("linear_attention.merged.sigma")(**kw) == pytest.approx(31 / 36, rel=1e-15)
    kw = dict(t=690.0, tau=1.0, D=10**9, N=10**9, w_init=1e-300)
    assert theory.get("linear_attention.merged.white_loss")(**kw) == pytest.approx(float(
        mp50("linear_attention.merged.white_loss", **kw)), rel=1e-14)


def test_sigma_and_white_loss_vectorised_over_a_long_time_span():
    t = np.concatenate([[0.0], np.geomspace(1e-6, 1e6, 200)])
    for name in ("sigma", "white_loss"):
        value = theory.get("linear_attention.merged." + name)(t=t, tau=1.0, D=4, N=31, w_init=1e-300)
        assert np.all(np.isfinite(value))


# -- Corollary 1 where E = e^{M h} overflows --------------------------------------------------------------
@pytest.mark.parametrize("M", [2, 10, 1000, 10**9, 2**53])
@pytest.mark.parametrize("epsilon", [1e-3, 1e-10, 1e-100, 1e-200, 1e-300, 1e-307])
def test_convergence_steps_is_finite_out_to_tiny_epsilon(M, epsilon):
    kw = dict(M=M, K=1, eta_Y=1.0, epsilon=epsilon)
    cf = theory.get("scan_snap.speed.convergence_steps")
    value = cf(**kw)
    assert math.isfinite(value)
    assert value == pytest.approx(float(mp50(cf.id, **kw)), rel=1e-13)


def test_convergence_steps_at_huge_M_and_tiny_epsilon():
    value = theory.get("scan_snap.speed.convergence_steps")(M=10**9, K=1, eta_Y=1.0, epsilon=1e-300)
    assert value == pytest.approx(1e300 * (1 - 5e-10), rel=1e-15)


# -- mpmath budget of the h* recursion ----------------------------------------------------------------------
def test_discrete_mpmath_step_budget():
    from theory.scan_snap.h import MPMATH_DIGIT_STEPS

    cf = theory.get("scan_snap.h.discrete")
    with mpmath.workdps(1000):
        with pytest.raises(ValueError, match="^s: the mpmath backend iterates at most"):
            cf("mpmath", s=MPMATH_DIGIT_STEPS // 1000 + 1, M=30, eta_Y=1.0)
    with mpmath.workdps(50):
        with pytest.raises(ValueError, match="^s: "):
            cf("mpmath", s=10**7, M=30, eta_Y=1.0)
        assert float(cf("mpmath", s=100, M=30, eta_Y=1.0)) == pytest.approx(cf(s=100, M=30, eta_Y=1.0),
                                                                            rel=1e-13)
    with mpmath.workdps(50):  # the decoder records iterate the same recursion
        with pytest.raises(ValueError, match="^s: "):
            theory.get("scan_snap.decoder.residual")("mpmath", s=10**7, M=30, eta_Y=1.0)


# -- other extreme but valid inputs -----------------------------------------------------------------------
def test_white_loss_for_large_w_init_and_its_bound():
    cf = theory.get("linear_attention.merged.white_loss")
    for w in (10.0, 1e50, 1e150):
        for t in (1.0, 10.0, 1e3):
            kw = dict(t=t, tau=1.0, D=4, N=31, w_init=w)
            assert cf(**kw) == pytest.approx(float(mp50(cf.id, **kw)), rel=1e-12)
    with pytest.raises(ValueError, match="^w_init: must be <= 1e\\+154"):
        cf(t=1.0, tau=1.0, D=4, N=31, w_init=1e300)


@pytest.mark.parametrize("cf_id, extra", [("scan_snap.h.logarithmic", {}), ("scan_snap.speed.gamma_log", {"K": 1})])
def test_t_to_infinity_forms_refuse_t_0(cf_id, extra):
    with pytest.raises(ValueError, match="^t: must be > 0"):
        theory.get(cf_id)(t=0.0, M=30, eta_Y=1.0, **extra)


@pytest.mark.parametrize("eta", [1e3, 1e30, 1e300])
def test_h_recursion_with_a_huge_learning_rate(eta):
    """e^{M h} overflowed (math.exp raised) after one step; the increment is bounded."""
    cf = theory.get("scan_snap.h.discrete")
    kw = dict(s=50, M=30, eta_Y=eta)
    with mpmath.workdps(50):
        reference = float(cf("mpmath", **kw))
    assert cf(**kw) == pytest.approx(reference, rel=1e-13)
    assert cf(s=50, M=30, eta_Y=np.array([eta, 1.0]))[0] == pytest.approx(reference, rel=1e-13)


def test_python_float_overflow_is_not_an_exception():
    """Scalars reach numpy as float64: lam**2 at lam = 1e300 overflowed a Python float
    (OverflowError); 6/eta**2 at eta = 1e-300 divided a Python float by 0 (ZeroDivisionError)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        big = theory.get("linear_attention.data.lambda_hat_sq_eigenvalue")(lam=1e300, trLambda=1.0, N=3)
        tiny = theory.get("localization.rho.derivative_at_zero_xi")(theta=0.5, eta=1e-300)
    assert big == math.inf  # the true value, about 1e600, exceeds 1e308
    assert tiny == 0.0  # the true value, about -1e-200443607032270064, underflows
