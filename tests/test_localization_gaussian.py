"""Lemma 3 of Bao, Hataya, Karakida 2024 (Gaussian moments with a mean, eqs. 11-14).

The registered forms are compared with an independent per-entry Isserlis expansion at D = 2
(scalar polynomials in the entries of x = mu + z, pairings summed by hand), with the paper's
printed forms, across the numpy / mpmath / torch backends, and on bad input.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import sympy as sp

import theory
from theory.emit import emit
from theory.matrices import evaluate_explicit
from theory.localization import sym
from theory.symbols import dim

IDS = ("localization.gaussian.quadratic_mean", "localization.gaussian.second_moment",
       "localization.gaussian.cubic_moment", "localization.gaussian.quartic_moment")


@pytest.fixture(scope="module")
def lemma3():
    """The topic module (imported here, at run time, so that it registers its records)."""
    from theory.localization import gaussian as module

    return module


def _point(seed=0, d=3):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    Sigma = (Q * np.array([1.0, 0.5, 0.2][:d])) @ Q.T
    G = rng.standard_normal((d, d))
    return {"Sigma": 0.5 * (Sigma + Sigma.T), "W_QK": 0.5 * (G + G.T),
            "mu": [0.3, -0.5, 0.8][:d], "a_vec": [0.7, 0.2, -0.4][:d]}


def _kw(cf, point):
    return {n: point[n] for n in cf.param_names}


# -- an independent derivation at D = 2 ------------------------------------------------------
D2 = 2
S_ENT = sp.Matrix(D2, D2, lambda i, j: sp.Symbol(f"s{min(i, j)}{max(i, j)}"))
W_ENT = sp.Matrix(D2, D2, lambda i, j: sp.Symbol(f"w{i}{j}"))           # general, not symmetric
MU_ENT = sp.Matrix(D2, 1, lambda i, j: sp.Symbol(f"m{i}"))
A_ENT = sp.Matrix(D2, 1, lambda i, j: sp.Symbol(f"a{i}"))
Z_ENT = sp.symbols(f"z0:{D2}")


def _pairings(idx):
    """Isserlis: sum over perfect matchings of prod Sigma_{ij} (0 for an odd count)."""
    if not idx:
        return sp.S.One
    if len(idx) % 2:
        return sp.S.Zero
    first, rest = idx[0], idx[1:]
    return sp.Add(*[S_ENT[first, rest[k]] * _pairings(rest[:k] + rest[k + 1:]) for k in range(len(rest))])


def _expect(poly):
    """E over z ~ N(0, Sigma) of a polynomial in the entries of z."""
    p = sp.Poly(sp.expand(poly), *Z_ENT)
    return sp.expand(sp.Add(*[c * _pairings([i for i, k in enumerate(m) for _ in range(k)]) for m, c in p.terms()]))


def _by_hand():
    """E[x^T W x], E[x x^T], E[a^T W x x^T W x], E[(x^T W x)^2] with W = (W + W^T)/2, per entry."""
    Ws = (W_ENT + W_ENT.T) / 2
    x = MU_ENT + sp.Matrix(Z_ENT)
    q = (x.T * Ws * x)[0, 0]
    aWx = (A_ENT.T * Ws * x)[0, 0]
    return {
        IDS[0]: _expect(q),
        IDS[1]: (x * x.T).applyfunc(_expect),
        IDS[2]: _expect(aWx * q),
        IDS[3]: _expect(q**2),
    }


def _explicit(expr):
    """A record's expression at D = 2 with the explicit entries above."""
    e = expr.subs(dim(), D2)
    reps = {sp.MatrixSymbol("Sigma", D2, D2): sp.ImmutableMatrix(S_ENT),
            sp.MatrixSymbol("W_QK", D2, D2): sp.ImmutableMatrix(W_ENT),
            sp.MatrixSymbol("mu", D2, 1): sp.ImmutableMatrix(MU_ENT),
            sp.MatrixSymbol("a_vec", D2, 1): sp.ImmutableMatrix(A_ENT)}
    out = evaluate_explicit(e.xreplace(reps))
    return out.applyfunc(sp.expand) if isinstance(out, sp.MatrixBase) else sp.expand(out)


@pytest.fixture(scope="module")
def by_hand():
    return _by_hand()


@pytest.mark.parametrize("cf_id", IDS)
def test_derived_equals_per_entry_isserlis(lemma3, by_hand, cf_id):
    cf = theory.get(cf_id)
    diff = sp.Matrix([_explicit(cf.expr) - by_hand[cf_id]]) if cf.output == "scalar" \
        else _explicit(cf.expr) - by_hand[cf_id]
    assert all(sp.expand(x) == 0 for x in diff)


@pytest.mark.parametrize("cf_id", IDS)
def test_printed_equals_derived(lemma3, by_hand, cf_id):
    """The paper's eqs. 11-14 (in W = (W_QK + W_QK^T)/2) equal the derivation: no erratum."""
    cf = theory.get(cf_id)
    assert not cf.erratum
    diff = _explicit(cf.printed_expr) - by_hand[cf_id]
    assert all(sp.expand(x) == 0 for x in (diff if isinstance(diff, sp.MatrixBase) else [diff]))


def test_symmetry_is_needed_for_eq13(lemma3):
    """For a general W the cubic moment is a^T W Sigma (W + W^T) mu + ...: eq. 13's 2 a^T W Sigma W mu
    needs W symmetric (the engine's general-W result differs from the printed form in raw W)."""
    general = lemma3.gaussian_moment([("a", "x"), ("x", "x")])
    printed_raw = theory.get(IDS[2]).printed_expr.xreplace({lemma3._symmetric_part(): sym("W_QK")})
    diff = _explicit(general) - _explicit(printed_raw)
    assert sp.expand(diff) != 0
    # ... and they agree once W is symmetric
    sym_W = {sp.Symbol("w10"): sp.Symbol("w01")}
    assert sp.expand(diff.xreplace(sym_W)) == 0


def test_centred_limits(lemma3):
    """mu = 0: E[x^T W x] = tr(W Sigma), E[(x^T W x)^2] = 2 tr((W Sigma)^2) + tr(W Sigma)^2, eq. 13 = 0."""
    p = _point()
    p["mu"] = [0.0, 0.0, 0.0]
    WS = p["W_QK"] @ p["Sigma"]
    assert theory.get(IDS[0])(**_kw(theory.get(IDS[0]), p)) == pytest.approx(np.trace(WS), rel=1e-13)
    assert theory.get(IDS[3])(**_kw(theory.get(IDS[3]), p)) == pytest.approx(
        2 * np.trace(WS @ WS) + np.trace(WS) ** 2, rel=1e-13)
    assert theory.get(IDS[2])(**_kw(theory.get(IDS[2]), p)) == 0.0


# -- numerics -------------------------------------------------------------------------------------
@pytest.mark.parametrize("cf_id", IDS)
def test_numpy_mpmath_torch_agree(lemma3, cf_id):
    cf = theory.get(cf_id)
    kw = _kw(cf, _point(1))
    value = np.asarray(cf(**kw), dtype=float)
    with mpmath.workdps(50):
        ref_mp = cf("mpmath", **kw)
    ref = np.array(ref_mp.tolist(), dtype=float) if isinstance(ref_mp, mpmath.matrix) else float(ref_mp)
    tv = cf("torch", **kw).detach().numpy()
    scale = np.max(np.abs(ref))
    assert np.max(np.abs(value - ref)) <= 1e-12 * scale
    assert np.max(np.abs(tv - ref)) <= 1e-12 * scale
    assert np.shape(value) == ((3, 3) if cf.output == "matrix" else ())


@pytest.mark.parametrize("cf_id", IDS)
def test_printed_form_numerically(lemma3, cf_id):
    cf = theory.get(cf_id)
    kw = _kw(cf, _point(2))
    values, dims = cf.validate(kw)
    fn = emit(cf.printed_expr, cf._args(), "numpy")
    printed = np.asarray(fn(*[values[n] for n in cf.param_names], dims["D"]), dtype=float)
    assert np.max(np.abs(printed - cf(**kw))) <= 1e-12 * np.max(np.abs(cf(**kw)))


def test_against_plain_numpy(lemma3):
    """Hand-written numpy of eqs. 11-14 at a symmetric W (the paper's formulas)."""
    p = _point(3)
    S, W = p["Sigma"], p["W_QK"]
    mu, a = np.array(p["mu"]), np.array(p["a_vec"])
    trWS, mWm = np.trace(W @ S), mu @ W @ mu
    expect = [trWS + mWm, S + np.outer(mu, mu),
              2 * a @ W @ S @ W @ mu + (a @ W @ mu) * (trWS + mWm),
              2 * np.trace(W @ S @ W @ S) + trWS**2 + 4 * mu @ W @ S @ W @ mu + 2 * trWS * mWm + mWm**2]
    for cf_id, e in zip(IDS, expect):
        cf = theory.get(cf_id)
        assert np.allclose(cf(**_kw(cf, p)), e, rtol=1e-13, atol=1e-13)


def test_non_symmetric_W_is_read_as_its_symmetric_part(lemma3):
    p = _point(4)
    rng = np.random.default_rng(5)
    K = rng.standard_normal((3, 3))
    skew = p | {"W_QK": p["W_QK"] + (K - K.T)}
    for cf_id in (IDS[0], IDS[2], IDS[3]):
        cf = theory.get(cf_id)
        assert cf(**_kw(cf, skew)) == pytest.approx(cf(**_kw(cf, p)), rel=1e-12)


# -- bad input --------------------------------------------------------------------------------------
BAD = [
    ("non-symmetric Sigma", IDS[0], {"Sigma": [[1.0, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]}, "Sigma"),
    ("non-PD Sigma", IDS[3], {"Sigma": [1.0, -0.5, 0.2]}, "Sigma"),
    ("mu of the wrong length", IDS[0], {"mu": [0.1, 0.2]}, "mu"),
    ("NaN in mu", IDS[1], {"mu": [0.1, float("nan"), 0.3]}, "mu"),
    ("a_vec as a matrix", IDS[2], {"a_vec": np.ones((3, 3))}, "a_vec"),
    ("a_vec of the wrong length", IDS[2], {"a_vec": [1.0, 2.0, 3.0, 4.0]}, "a_vec"),
    ("non-square W_QK", IDS[3], {"W_QK": np.ones((3, 2))}, "W_QK"),
    ("W_QK size vs Sigma", IDS[0], {"W_QK": np.eye(2)}, "W_QK"),
    ("text mu", IDS[3], {"mu": "zero"}, "mu"),
]


@pytest.mark.parametrize("what, cf_id, override, name", BAD, ids=[b[0] for b in BAD])
def test_bad_input(lemma3, what, cf_id, override, name):
    cf = theory.get(cf_id)
    kw = _kw(cf, _point()) | override
    with pytest.raises(ValueError, match=f"^{name}"):
        cf(**kw)


def test_missing_parameter(lemma3):
    cf = theory.get(IDS[2])
    kw = _kw(cf, _point())
    del kw["a_vec"]
    with pytest.raises(ValueError, match="^a_vec"):
        cf(**kw)
