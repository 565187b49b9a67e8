"""Every registered closed form: its record, its symbolic identities, its three numeric
backends, its printed form evaluated numerically, its input validation, and the published
numbers of the paper (Zhang, Singh, Latham, Saxe 2025).

Reference values in the last section are independent of the code: numbers printed in the
paper, hand-computed numbers, or hand formulas evaluated in exact rational arithmetic.
"""

from fractions import Fraction
from math import log, sqrt

import mpmath
import numpy as np
import pytest
import sympy as sp

import theory
from theory.cli import example_values
from theory.emit import emit
from theory.registry import STATUSES
from theory.symbols import dim

IDS = theory.ids()
SPECTRUM = [0.4, 0.3, 0.2, 0.1]  # the Fig. 1 / Fig. 3 covariance spectrum


def _rotated(eigs, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((len(eigs), len(eigs))))
    Lam = Q @ np.diag(eigs) @ Q.T
    return 0.5 * (Lam + Lam.T)


#: A non-diagonal SPD 3 x 3 matrix, for tests that need one.
ROTATED = _rotated([1.3, 0.6, 0.2], seed=7)


def _default(cf, p, example):
    """Test value of parameter ``p`` of ``cf``: the record's example point
    (:func:`theory.cli.example_values`), with a covariance given as eigenvalues rotated by a fixed
    non-diagonal orthogonal matrix (so that the backends see a full matrix) and a matrix given by
    its kind's default replaced by a fixed random one."""
    value = example[p.name]
    if p.kind == "covariance" and np.ndim(value) == 1:
        return _rotated(value, seed=7)
    if p.kind == "matrix" and p.example_value is None and not (cf.example and p.name in cf.example):
        return np.random.default_rng(20250121).standard_normal((len(value), len(value)))
    return value


def params_of(cf, **override):
    example = example_values(cf)
    kw = {p.name: _default(cf, p, example) for p in cf.params}
    kw.update(override)
    return kw


def as_array(value):
    """numpy / mpmath / torch output -> float64 numpy array (or float)."""
    if isinstance(value, list):  # mpmath vector output
        return np.array([float(v) for v in value])
    if isinstance(value, mpmath.matrix):
        return np.array(value.tolist(), dtype=np.float64)
    if hasattr(value, "detach"):
        return value.detach().numpy().astype(np.float64)
    if isinstance(value, (mpmath.mpf, float, int)):
        return float(value)
    return np.asarray(value, dtype=np.float64)


def rel_err(actual, reference):
    """Largest absolute difference over the largest reference magnitude (norm-wise, so that
    matrix entries near zero do not dominate)."""
    a, r = np.asarray(actual, dtype=float), np.asarray(reference, dtype=float)
    assert a.shape == r.shape, (a.shape, r.shape)
    return float(np.max(np.abs(a - r)) / max(np.max(np.abs(r)), np.finfo(float).tiny))


# -- the record -----------------------------------------------------------------------
@pytest.mark.parametrize("cf_id", IDS)
def test_record_is_complete(cf_id):
    cf = theory.get(cf_id)
    assert cf.id == cf_id and cf_id.count(".") == 2
    assert cf.title.strip() and cf.source.strip()
    assert cf.status in STATUSES
    assert cf.output in ("scalar", "matrix", "vector")
    assert cf.params and len(set(cf.param_names)) == len(cf.param_names)
    assert all(isinstance(p, theory.Param) for p in cf.params)
    if cf.erratum:
        assert cf.printed is not None, "an erratum needs the printed form it corrects"


@pytest.mark.parametrize("cf_id", IDS)
def test_expr_derives_in_the_declared_parameters(cf_id):
    cf = theory.get(cf_id)
    expr = cf.expr
    assert isinstance(expr, sp.Basic)
    allowed = set(cf._args()) | {dim()}
    assert expr.free_symbols <= allowed, expr.free_symbols - allowed


@pytest.mark.parametrize("cf_id", [i for i in IDS if theory.get(i).printed is not None])
def test_printed_equals_derived_unless_erratum(cf_id):
    """The paper's form equals the derivation exactly when no erratum is recorded."""
    cf = theory.get(cf_id)
    assert cf.equal(cf.expr, cf.printed_expr) is (not cf.erratum)


@pytest.mark.parametrize("cf_id", [i for i in IDS if theory.get(i).stable is not None])
def test_stable_rewrite_equals_derived(cf_id):
    cf = theory.get(cf_id)
    assert cf.equal(cf.expr, cf.numeric_expr) is True


# -- backends -------------------------------------------------------------------------
@pytest.mark.parametrize("cf_id", IDS)
def test_numpy_mpmath_torch_agree(cf_id):
    """numpy (float64) and torch (float64) within 1e-12 of mpmath at 50 digits."""
    cf = theory.get(cf_id)
    kw = params_of(cf)
    value = cf(**kw)
    with mpmath.workdps(50):
        reference = as_array(cf("mpmath", **kw))
    torch_value = as_array(cf("torch", **kw))
    assert rel_err(value, reference) <= 1e-12
    assert rel_err(torch_value, reference) <= 1e-12
    values, dims = cf.validate(kw)
    D = dims.get("D")
    if cf.output == "vector":
        size = cf.length(values, dims) if cf.length else int(sp.sympify(cf.expr.shape[0]).subs(dim(), D or 0))
        shape = (size,)
    else:
        shape = {"scalar": (), "matrix": (D * D, D * D) if cf_id.endswith(".zz") else (D, D)}[cf.output]
    assert np.shape(value) == shape
    if cf.output == "scalar":
        assert isinstance(value, float)


# -- printed forms, numerically -------------------------------------------------------
def _printed_ids():
    out = []
    for i in IDS:
        cf = theory.get(i)
        if cf.printed is None:
            continue
        out.append(pytest.param(i, id=i))
    return out


PRINTED_IDS = _printed_ids()


def printed_value(cf, kw):
    """The printed expression emitted by theory.emit for numpy and evaluated at ``kw``."""
    values, dims = cf.validate(kw)
    args = [values[n] for n in cf.param_names]
    if cf.derived is not None:  # auxiliary symbols (eigen-projectors) computed from the parameters
        extra = cf.derived(values, dims, "numpy")
        args += [extra[n] for n in cf.derived_names]
    if "D" not in cf.param_names:
        args.append(dims.get("D", 1))
    fn = emit(cf.printed_expr, cf._args(), "numpy")
    out = np.asarray(fn(*args), dtype=np.float64)
    return out.reshape(-1) if cf.output == "vector" else out


@pytest.mark.parametrize("cf_id", PRINTED_IDS)
def test_printed_form_numerically(cf_id):
    """The printed form evaluates to the record's value (1e-12), or, for an erratum, far from it."""
    cf = theory.get(cf_id)
    kw = params_of(cf)
    diff = rel_err(printed_value(cf, kw), cf(**kw))
    if cf.erratum:
        # an erratum's printed form differs far beyond round-off (by how much depends on the
        # erratum: eq. 30 line 2 is off by a factor ~N^2, the rounded drop by O(1/N))
        assert diff > 1e-3, f"the erratum's printed form should differ, got {diff:.3g}"
    else:
        assert diff <= 1e-12


@pytest.mark.parametrize("cf_id", PRINTED_IDS)
def test_printed_evaluation_in_every_backend(cf_id):
    """ClosedForm(printed=True) in numpy, mpmath (50 digits) and torch against the direct emission."""
    cf = theory.get(cf_id)
    kw = params_of(cf)
    direct = printed_value(cf, kw)
    assert rel_err(cf(printed=True, **kw), direct) <= 1e-15
    with mpmath.workdps(50):
        assert rel_err(as_array(cf("mpmath", printed=True, **kw)), direct) <= 1e-12
    assert rel_err(as_array(cf("torch", printed=True, **kw)), direct) <= 1e-12


def test_eq30_line2_grows_like_N_squared():
    """Read literally, eq. 30 line 2 grows like N^2 while E[Lambda_hat^2] tends to Lambda^2."""
    cf = theory.get("linear_attention.data.lambda_hat_sq_eq30_line2")
    Lam = ROTATED
    ratios = [np.linalg.norm(printed_value(cf, {"Lambda": Lam, "N": N})) / N**2 for N in (100, 1000)]
    assert ratios[1] == pytest.approx(np.linalg.norm(Lam @ Lam), rel=2e-2)
    assert cf(Lambda=Lam, N=10**6) == pytest.approx(Lam @ Lam, rel=1e-5, abs=1e-6)


# -- bad input ------------------------------------------------------------------------
HAT_SQ = "linear_attention.data.lambda_hat_sq"
LOSS = "linear_attention.merged.loss"
SIGMA = "linear_attention.merged.sigma"
SIGMA_ARGS = {"t": 1.0, "tau": 1.0, "D": 4, "N": 31, "w_init": 1e-3}
LAM3 = np.diag([1.0, 0.5, 0.2])

BAD = [
    ("non-symmetric Lambda", HAT_SQ, {"Lambda": [[1.0, 0.5], [0.0, 1.0]], "N": 3}, "Lambda"),
    ("non-PD Lambda", HAT_SQ, {"Lambda": [[1.0, 2.0], [2.0, 1.0]], "N": 3}, "Lambda"),
    ("negative eigenvalue", HAT_SQ, {"Lambda": [1.0, -0.5], "N": 3}, "Lambda"),
    ("non-square Lambda", HAT_SQ, {"Lambda": np.ones((2, 3)), "N": 3}, "Lambda"),
    ("3-d Lambda", HAT_SQ, {"Lambda": np.ones((2, 2, 2)), "N": 3}, "Lambda"),
    ("empty Lambda", HAT_SQ, {"Lambda": [], "N": 3}, "Lambda"),
    ("NaN in Lambda", HAT_SQ, {"Lambda": [1.0, float("nan")], "N": 3}, "Lambda"),
    ("text Lambda", HAT_SQ, {"Lambda": "identity", "N": 3}, "Lambda"),
    ("M size vs Lambda", LOSS, {"Lambda": LAM3, "N": 3, "M": np.eye(2)}, "M"),
    ("non-square M", LOSS, {"Lambda": LAM3, "N": 3, "M": np.ones((3, 2))}, "M"),
    ("infinite M", LOSS, {"Lambda": LAM3, "N": 3, "M": np.full((3, 3), np.inf)}, "M"),
    ("N = 0", HAT_SQ, {"Lambda": LAM3, "N": 0}, "N"),
    ("N = 2.5", HAT_SQ, {"Lambda": LAM3, "N": 2.5}, "N"),
    ("N = NaN", HAT_SQ, {"Lambda": LAM3, "N": float("nan")}, "N"),
    ("N boolean", HAT_SQ, {"Lambda": LAM3, "N": True}, "N"),
    ("N text", HAT_SQ, {"Lambda": LAM3, "N": "five"}, "N"),
    ("N_max = 0", "linear_attention.ntp.inv_length_mean", {"N_max": 0}, "N_max"),
    ("negative tau", SIGMA, {**SIGMA_ARGS, "tau": -1.0}, "tau"),
    ("tau = 0", SIGMA, {**SIGMA_ARGS, "tau": 0.0}, "tau"),
    ("w_init = 0", SIGMA, {**SIGMA_ARGS, "w_init": 0.0}, "w_init"),
    ("infinite w_init", SIGMA, {**SIGMA_ARGS, "w_init": float("inf")}, "w_init"),
    ("negative t", SIGMA, {**SIGMA_ARGS, "t": -1.0}, "t"),
    ("NaN t", SIGMA, {**SIGMA_ARGS, "t": float("nan")}, "t"),
    ("NaN in t array", SIGMA, {**SIGMA_ARGS, "t": np.array([0.0, np.nan])}, "t"),
    ("D = 0", SIGMA, {**SIGMA_ARGS, "D": 0}, "D"),
    ("negative lam", "linear_attention.data.lambda_hat_sq_eigenvalue",
     {"lam": -1.0, "trLambda": 1.0, "N": 3}, "lam"),
    ("missing parameter", LOSS, {"Lambda": LAM3, "N": 3}, "M"),
    ("extra parameter", HAT_SQ, {"Lambda": LAM3, "N": 3, "sigma": 1.0}, "sigma"),
]


@pytest.mark.parametrize("case, cf_id, kw, name", BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_the_parameter(case, cf_id, kw, name):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        theory.get(cf_id)(**kw)


def test_unknown_id():
    with pytest.raises(ValueError, match=r"^id: "):
        theory.get("linear_attention.merged.no_such_form")


def test_unknown_backend():
    with pytest.raises(ValueError, match=r"^backend: "):
        theory.get(HAT_SQ)("jax", Lambda=LAM3, N=3)


def test_half_rise_time_outside_its_domain_is_bad_input():
    cf = theory.get("linear_attention.merged.half_rise_time")
    with pytest.raises(ValueError, match=r"^w_init: "):
        cf(tau=1.0, D=4, N=5, w_init=1.0)


# -- published and hand values ----------------------------------------------------------
def _harmonic(n):
    return sum(Fraction(1, k) for k in range(1, n + 1))


def _min_loss_hand(eigs, inv_len):
    """Eq. 19 / 26 with m = D in exact arithmetic: tr L - sum_d l_d / (1 + nu (1 + tr L / l_d))."""
    eigs = [Fraction(e) for e in eigs]
    T = sum(eigs)
    return T - sum(l / (1 + inv_len * (1 + T / l)) for l in eigs)


SPECTRUM_EXACT = [Fraction(4, 10), Fraction(3, 10), Fraction(2, 10), Fraction(1, 10)]


@pytest.mark.parametrize("Lam", [SPECTRUM, _rotated(SPECTRUM, seed=3)], ids=["diagonal", "rotated"])
def test_global_min_loss_fig1_spectrum(Lam):
    """0.135995 for (0.4, 0.3, 0.2, 0.1), N = 31 (and eq. 19 with m = D, exactly)."""
    value = theory.get("linear_attention.merged.global_min_loss")(Lambda=Lam, N=31)
    assert round(value, 6) == 0.135995
    assert value == pytest.approx(float(_min_loss_hand(SPECTRUM_EXACT, Fraction(1, 31))), rel=1e-13)


@pytest.mark.parametrize("c, expected", [(1.0, Fraction(5, 9)), (0.25, Fraction(5, 36))])
def test_global_min_loss_white(c, expected):
    """Lambda = c I_4, N = 31 gives c D (1 + D)/(N + 1 + D): 5/9 and 5/36."""
    value = theory.get("linear_attention.merged.global_min_loss")(Lambda=c * np.eye(4), N=31)
    assert value == pytest.approx(float(expected), rel=1e-14)


def test_ntp_global_min_loss_fig7():
    """Eq. 26 with m = D for (0.4, 0.3, 0.2, 0.1), N_max = 31: 0.379520."""
    value = theory.get("linear_attention.ntp.global_min_loss")(Lambda=SPECTRUM, N_max=31)
    assert round(value, 6) == 0.379520
    assert value == pytest.approx(float(_min_loss_hand(SPECTRUM_EXACT, _harmonic(31) / 31)), rel=1e-13)


@pytest.mark.parametrize("N_max, printed", [(31, 0.129911), (8, 0.339732)])
def test_inv_length_mean(N_max, printed):
    """E(1/N) = H_Nmax / N_max: 0.129911 at 31, H_8/8 = 761/2240 at 8."""
    value = theory.get("linear_attention.ntp.inv_length_mean")(N_max=N_max)
    assert round(value, 6) == printed
    assert value == pytest.approx(float(_harmonic(N_max) / N_max), rel=1e-14)
    if N_max == 8:
        assert _harmonic(8) / 8 == Fraction(761, 2240)


@pytest.mark.parametrize("D, w_init", [(1, 0.3), (4, 1e-2), (9, 1e-6)])
def test_sigma_at_zero(D, w_init):
    """sigma(0) = w_init^2 / sqrt(D) (eq. 10)."""
    value = theory.get(SIGMA)(t=0.0, tau=1.0, D=D, N=31, w_init=w_init)
    assert value == pytest.approx(w_init**2 / sqrt(D), rel=1e-14)


def test_sigma_infinity_white_fig():
    """sigma(inf) = N/(N + 1 + D) = 31/36 for D = 4, N = 31."""
    assert theory.get("linear_attention.merged.sigma_infinity")(D=4, N=31) == pytest.approx(31 / 36, rel=1e-15)
    assert theory.get(SIGMA)(t=100.0, tau=1.0, D=4, N=31, w_init=1e-3) == pytest.approx(31 / 36, rel=1e-14)


@pytest.mark.parametrize("D, N", [(4, 31), (1, 1), (6, 1000)])
def test_white_loss_limits(D, N):
    """Eq. 51: L(0) = D (1 - sigma0)^2 + ... ~ D, and L(inf) = D (1 + D)/(N + 1 + D)."""
    cf = theory.get("linear_attention.merged.white_loss")
    late = cf(t=1e3, tau=1.0, D=D, N=N, w_init=1e-3)
    assert late == pytest.approx(D * (1 + D) / (N + 1 + D), rel=1e-14)
    s0, alpha = 1e-6 / sqrt(D), 1 + (1 + D) / N
    early = cf(t=0.0, tau=1.0, D=D, N=N, w_init=1e-3)
    assert early == pytest.approx(D * (1 - 2 * s0 + alpha * s0**2), rel=1e-14)


def test_half_rise_time_spec_value():
    """Eq. 10 reaches sigma_inf/2 at 3.590 tau for D = 4, N = 31, w_init = 1e-3."""
    value = theory.get("linear_attention.merged.half_rise_time")(tau=1.0, D=4, N=31, w_init=1e-3)
    assert round(value, 3) == 3.590
    alpha = 1 + 5 / 31
    assert value == pytest.approx(log(2 / (alpha * 1e-6) - 1) / 4, rel=1e-14)


def test_gamma_fig1_spectrum():
    """gamma = ||Lambda^2||_F = sqrt(sum lambda^4) = sqrt(0.0354) = 0.188149."""
    Lam = _rotated(SPECTRUM, seed=5)
    value = theory.get("linear_attention.merged.gamma")(Lambda=Lam)
    assert round(value, 5) == 0.18815
    assert value == pytest.approx(sqrt(0.0354), rel=1e-14)
    assert value == pytest.approx(np.linalg.norm(Lam @ Lam, "fro"), rel=1e-13)


def test_plateau_time_fig1_spectrum():
    """Eq. 54: tau/||Lambda^2||_F ln(1/w_init) = 48.95 tau at w_init = 1e-4."""
    value = theory.get("linear_attention.merged.plateau_time")(Lambda=SPECTRUM, tau=1.0, w_init=1e-4)
    assert round(value, 2) == 48.95
    assert value == pytest.approx(log(1e4) / sqrt(0.0354), rel=1e-14)
