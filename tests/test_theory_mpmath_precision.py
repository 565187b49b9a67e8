"""The mpmath backend computes to the working precision, from inputs taken exactly.

* every record: the value at 30 digits agrees with the value at 60 digits at a random valid point
  (nothing on the way loses digits as the precision grows); and every derived value of the mpmath
  backend is an mpmath number, a derived eigen-projector one to 60 digits (P^2 = P, P Lambda =
  Lambda P), which a float64 intermediate (the same at 30 and 60 digits) would fail;
* independent references, written from the formulas in exact rational arithmetic (never by calling
  the toolkit), for eq. 31 (``data.lambda_hat_sq``) with a non-diagonal matrix given as exact
  fractions, eq. 19 with m = D (``merged.global_min_loss``, a matrix inverse of the emitted form),
  and eq. 63 (``separate.subset_loss``, eigen-projectors) at a covariance of condition number 1e12,
  where float64 loses digits and mpmath at 50 digits does not;
* inputs given as ``mpmath.mpf``, ``Fraction``, ``Decimal`` and decimal strings give the same value,
  and the decimal string ``"0.1"`` is not the float ``0.1`` (no float64 round trip), also through the
  command line (``--json`` numbers with ``--backend mpmath``).
"""

import json
from decimal import Decimal
from fractions import Fraction

import mpmath
import numpy as np
import pytest

import theory
from theory import cli
from verify.symbolic import sample_params

#: Digits of the two evaluations compared for every record.
LOW_DPS, HIGH_DPS = 30, 60
#: Their agreement, relative to the largest entry: the low precision's unit (1e-30) with five digits
#: left for the conditioning of a closed form at a random point (the largest seen is about 6e-29).
DPS_RTOL = 10.0 ** (5 - LOW_DPS)
#: Records whose mpmath value is limited below the working precision by construction (a quadrature
#: or an iteration at a fixed tolerance), each with the reason. None so far: the recursion
#: (``scan_snap.h.discrete``, s <= 1000 here) runs step by step at the working precision, and the
#: Newton solves (``scan_snap.h.continuous``) and the erf differences (``localization.rho``) stop at it.
LIMITED: dict[str, str] = {}


def _entries(value) -> list:
    """An mpmath scalar, matrix or vector as a flat list of ``mpf``."""
    if isinstance(value, mpmath.matrix):
        return [value[i, j] for i in range(value.rows) for j in range(value.cols)]
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _rel_diff(a, b, vanishing=0):
    """max |a - b| over max |b| (norm-wise, entries of matrices and vectors); absolute where
    max |b| is at most ``vanishing``."""
    a, b = _entries(a), _entries(b)
    assert len(a) == len(b)
    scale = max(abs(mpmath.mpf(x)) for x in b)
    diff = max(abs(mpmath.mpf(x) - mpmath.mpf(y)) for x, y in zip(a, b))
    return diff / scale if scale > vanishing else diff


# -- every record: 30 digits against 60 -------------------------------------------------------------
RNG = np.random.default_rng(20261124)
POINTS = {cf.id: sample_params(cf, RNG) for cf in theory.records()}


@pytest.mark.parametrize("cf_id", sorted(set(POINTS) - set(LIMITED)))
def test_value_at_30_digits_agrees_with_60(cf_id):
    """Relative to the value; absolutely where the value vanishes at the point (below
    :data:`DPS_RTOL`: a gradient at a fixed point is 1e-31 at 30 digits and 1e-61 at 60, the
    round-off of its order-one terms; the parameters are drawn of order one)."""
    cf, kw = theory.get(cf_id), POINTS[cf_id]
    with mpmath.workdps(LOW_DPS):
        low = cf("mpmath", **kw)
    with mpmath.workdps(HIGH_DPS):
        high = cf("mpmath", **kw)
        assert _rel_diff(low, high, vanishing=DPS_RTOL) <= DPS_RTOL, (kw, low, high)


DERIVED = sorted(cf.id for cf in theory.records() if cf.derived is not None)


@pytest.mark.parametrize("cf_id", DERIVED)
def test_derived_values_are_computed_at_the_working_precision(cf_id):
    """The comparison above cannot see a float64 intermediate (it is the same at 30 and 60 digits);
    so every derived value of the mpmath backend is an mpmath number (or an exact zero of padding),
    and a derived eigen-projector is one to 60 digits: P^2 = P and P Lambda = Lambda P (a float64
    projector, right to 1e-16, fails both)."""
    cf = theory.get(cf_id)
    with mpmath.workdps(HIGH_DPS):
        values, dims = cf.validate(POINTS[cf_id], "mpmath")
        extra = cf.derived(values, dims, "mpmath")
        tol = mpmath.mpf(10) ** (10 - HIGH_DPS)
        cov = next((values[p.name] for p in cf.params if p.kind == "covariance"), None)
        for name in cf.derived_names:
            v = extra[name]
            if isinstance(v, mpmath.matrix):
                assert mpmath.mnorm(v * v - v, 1) < tol, name
                assert cov is None or mpmath.mnorm(v * cov - cov * v, 1) < tol, name
            else:
                assert isinstance(v, (mpmath.mpf, int)) or v == 0, (name, type(v))


def test_limited_records_are_registered_and_explained():
    assert all(i in POINTS and reason for i, reason in LIMITED.items())


# -- exact rational references ------------------------------------------------------------------
def _mm(A, B):
    return [[sum(A[i][k] * B[k][j] for k in range(len(B))) for j in range(len(B[0]))] for i in range(len(A))]


def _T(A):
    return [list(r) for r in zip(*A)]


def _householder(v) -> list:
    """I - 2 v v^T / (v^T v): an orthogonal matrix with rational entries."""
    n, vv = len(v), sum(Fraction(x) ** 2 for x in v)
    return [[int(i == j) - 2 * Fraction(v[i]) * v[j] / vv for j in range(n)] for i in range(n)]


def _rotated(eigs, v=(1, 2, 3)) -> list:
    """H diag(eigs) H^T with the Householder matrix of ``v``: a non-diagonal symmetric matrix of
    exact fractions with eigenvalues ``eigs`` (its columns of H are the eigenvectors)."""
    H = _householder(v)
    D = [[eigs[i] if i == j else Fraction(0) for j in range(len(eigs))] for i in range(len(eigs))]
    return _mm(_mm(H, D), _T(H))


def _close(value, reference, rtol):
    """Norm-wise relative difference of an mpmath value from an exact (Fraction) reference."""
    ref = [mpmath.mpf(x.numerator) / x.denominator for x in _entries(reference)]
    return _rel_diff(value, ref) <= rtol


def _flat(A):
    return [x for row in A for x in row] if isinstance(A, list) and isinstance(A[0], list) else A


def test_lambda_hat_sq_with_an_exact_fraction_matrix():
    """Eq. 31: E[Lambda_hat^2] = (1 + 1/N) Lambda^2 + tr(Lambda) Lambda / N, Lambda given as fractions."""
    Lam = _rotated([Fraction(7, 10), Fraction(1, 3), Fraction(1, 7)])
    N = 5
    tr = sum(Lam[i][i] for i in range(3))
    L2 = _mm(Lam, Lam)
    ref = [[(1 + Fraction(1, N)) * L2[i][j] + tr * Lam[i][j] / N for j in range(3)] for i in range(3)]
    with mpmath.workdps(50):
        value = theory.get("linear_attention.data.lambda_hat_sq")("mpmath", Lambda=Lam, N=N)
        assert _close(value, _flat(ref), mpmath.mpf(10) ** -48)


def _min_summand(lam, T, N):
    """Per-direction minimum of eq. 19: lambda (lambda + tr Lambda) / ((N + 1) lambda + tr Lambda)."""
    return lam * (lam + T) / ((N + 1) * lam + T)


def test_global_min_loss_with_a_rotated_fraction_matrix():
    """Eq. 19 with m = D: sum_d l*(lambda_d), the emitted form inverting ((N+1) Lambda + tr(Lambda) I)."""
    eigs = [Fraction(9, 10), Fraction(3, 10), Fraction(1, 30)]
    N, T = 17, sum(eigs)
    ref = sum(_min_summand(lam, T, N) for lam in eigs)
    with mpmath.workdps(50):
        value = theory.get("linear_attention.merged.global_min_loss")("mpmath", Lambda=_rotated(eigs), N=N)
        assert _close(value, ref, mpmath.mpf(10) ** -47)


#: Eigenvalues of the ill-conditioned covariance (condition number 1e12), its context length and
#: subset; L(M_S) = sum_{d not in S} lambda_d + sum_{d in S} l*(lambda_d) (eq. 63) is about 1e-6.
ILL_EIGS = [Fraction(1), Fraction(1, 2), Fraction(1, 10**12)]
ILL_N, ILL_S = 10**6, [1, 2]


def test_subset_loss_at_condition_number_1e12():
    """Eq. 63 by eigen-projectors of a rotated covariance with eigenvalues 1, 1/2, 1e-12: mpmath at
    50 digits (``mpmath.eigsy`` of the exact input) matches the exact value to 1e-40; float64 does
    not get 13 digits (its projector, right to 1e-16 absolute, meets a loss of about 4.5e-6)."""
    T = sum(ILL_EIGS)
    ref = ILL_EIGS[2] + sum(_min_summand(ILL_EIGS[d - 1], T, ILL_N) for d in ILL_S)
    Lam = _rotated(ILL_EIGS)
    cf = theory.get("linear_attention.separate.subset_loss")
    as_float = [[float(x) for x in row] for row in Lam]
    with mpmath.workdps(50):
        value = cf("mpmath", Lambda=Lam, N=ILL_N, S=ILL_S)
        assert _close(value, ref, mpmath.mpf(10) ** -40)  # measured: 3e-46
        # the same matrix rounded to float64 entries first is a different covariance: its value is
        # 3e-12 off (what the mpmath backend gave when it read its inputs as float64)
        assert not _close(cf("mpmath", Lambda=as_float, N=ILL_N, S=ILL_S), ref, mpmath.mpf(10) ** -14)
    float64_err = abs(cf("numpy", Lambda=as_float, N=ILL_N, S=ILL_S) - float(ref)) / float(ref)
    assert float64_err > 1e-13  # measured: 1.1e-10


# -- exact inputs -----------------------------------------------------------------------------------
HAT_SQ = "linear_attention.data.lambda_hat_sq"


@pytest.mark.parametrize("form", [mpmath.mpf, Fraction, Decimal, str], ids=["mpf", "Fraction", "Decimal", "str"])
def test_every_exact_input_type_gives_the_same_value(form):
    """1/10, 3/10 as mpf (at 80 digits, rounded once to 50), Fraction, Decimal and decimal string."""
    cf = theory.get(HAT_SQ)
    with mpmath.workdps(50):
        reference = cf("mpmath", Lambda=[Fraction(1, 10), Fraction(3, 10)], N=3)
        if form is mpmath.mpf:
            with mpmath.workdps(80):
                entries = [mpmath.mpf("0.1"), mpmath.mpf("0.3")]
        else:
            entries = [form("0.1"), form("0.3")] if form is not Fraction else [Fraction("0.1"), Fraction("0.3")]
        value = cf("mpmath", Lambda=entries, N=3)
        assert value == reference


def test_decimal_string_is_not_the_float():
    """"0.1" is 1/10 to 50 digits; the float 0.1 differs from it by 5.5e-18 (what a float64 round trip
    would leave). As a covariance matrix, a steps list and a scalar."""
    with mpmath.workdps(50):
        tenth = mpmath.mpf(1) / 10
        cf = theory.get(HAT_SQ)
        exact = cf("mpmath", Lambda=["0.1"], N=1)[0, 0]      # (1 + 1) lam^2 + lam^2 = 3 lam^2
        rounded = cf("mpmath", Lambda=[0.1], N=1)[0, 0]
        assert abs(exact - 3 * tenth**2) < mpmath.mpf(10) ** -50
        assert abs(rounded - exact) > mpmath.mpf(10) ** -19
        sigma = theory.get("linear_attention.merged.sigma")
        kw = {p.name: p.example() for p in sigma.params}
        scalar = next(p.name for p in sigma.params if p.kind == "positive")
        a = sigma("mpmath", **dict(kw, **{scalar: "0.1"}))
        b = sigma("mpmath", **dict(kw, **{scalar: 0.1}))
        c = sigma("mpmath", **dict(kw, **{scalar: Fraction(1, 10)}))
        assert a == c and abs(a - b) > mpmath.mpf(10) ** -30 * abs(a)


def test_numpy_still_refuses_strings():
    with pytest.raises(ValueError, match="^Lambda: expected real numbers"):
        theory.get(HAT_SQ)("numpy", Lambda=["0.1"], N=1)


@pytest.mark.parametrize("bad, message", [
    ("abc", "^Lambda: expected real numbers, got a string that is not a decimal number"),
    ("nan", "^Lambda: expected real numbers, got a string"),
    (Decimal("NaN"), "^Lambda: expected finite real numbers"),
    (mpmath.mpf("inf"), "^Lambda: expected finite real numbers"),
    (mpmath.mpc(1, 1), "^Lambda: expected finite real numbers"),
    ("1e400", "^Lambda: too large for float64"),
    ("1e-100000000", "^Lambda: too small"),
    ("-0.1", "^Lambda: eigenvalues must be positive"),
    (True, "^Lambda: expected real numbers, got an entry that is a boolean"),
])
def test_bad_exact_input_names_the_parameter(bad, message):
    with pytest.raises(ValueError, match=message):
        theory.get(HAT_SQ)("mpmath", Lambda=[bad, 1], N=2)


def test_exact_index_and_tiny_positive_value():
    """An index given as a string or Fraction is the integer; 1e-400 (zero in float64) is still > 0."""
    cf = theory.get(HAT_SQ)
    with mpmath.workdps(50):
        assert cf("mpmath", Lambda=["1e-400"], N="4")[0, 0] == cf("mpmath", Lambda=[Fraction(1, 10**400)],
                                                                 N=Fraction(8, 2))[0, 0] > 0
    with pytest.raises(ValueError, match="^N: expected an integer"):
        cf("mpmath", Lambda=[1], N="2.5")


def test_cli_reads_json_numbers_as_decimals(capsys):
    """``--json`` numbers reach the mpmath backend as the decimals they spell; numpy is unchanged."""
    def run(*extra):
        assert cli.main(["eval", HAT_SQ, "--json", '{"Lambda": [0.1, 0.3], "N": 3}', *extra]) == 0
        return json.loads(capsys.readouterr().out)["value"]

    value = run("--backend", "mpmath", "--dps", "50")
    with mpmath.workdps(60):
        assert abs(mpmath.mpf(value[0][0]) - mpmath.mpf(2) / 75) < mpmath.mpf(10) ** -50  # 4/3 * 1/100 + 4/10 * 1/30
    assert run()[0][0] == pytest.approx(2 / 75, rel=1e-15)
