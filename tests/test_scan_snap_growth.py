"""Unit tests of the growth-factor records of Scan and Snap (Tian et al. 2023, Theorem 3 eq. 12, Theorem 4's
bullets and App. F; theory.scan_snap.growth), eq. 13's symmetric records, and the models they are checked with
(verify.models.scan_snap: shared_query_velocity, integrate_shared_query, population_growth_run, eq3_gradients)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from theory.scan_snap.growth import crossover_u
from verify.models.scan_snap import (attention_velocity, eq3_gradients, population_growth_run, population_run,
                                     shared_query_velocity, single_common)


def rec(name):
    return theory.get(f"scan_snap.{name}")


@settings(max_examples=30, deadline=None)
@given(B=st.floats(0.0, 20.0), f0=st.floats(0.01, 1.0), K=st.integers(1, 50))
def test_factor_bounds_order_and_printed(B, f0, K):
    lo, hi = rec("growth.factor_lower")(B=B, f0=f0, K=K), rec("growth.factor_upper")(B=B, K=K)
    plo = rec("growth.factor_lower")(B=B, f0=f0, K=K, printed=True)
    assert 1.0 <= lo <= hi <= math.exp(2 * B)
    assert lo <= plo and math.isclose(math.log(plo), K * math.log(lo), rel_tol=1e-12, abs_tol=1e-12)


def test_factor_bounds_refuses_an_entry_above_one():
    with pytest.raises(ValueError, match="^f0"):
        rec("growth.factor_lower")(B=1.0, f0=1.5, K=3)


@pytest.mark.parametrize("M", [5, 6, 34, 1000, 10**6, 10**9])
def test_crossover_root_and_its_place_between_the_scan_and_snap_times(M):
    u = crossover_u("numpy", M)
    assert u > 2 and abs(math.exp(u) * (u - 2) - (M - 1) * u + 2) <= 1e-9 * (M - 1) * u
    tc = rec("growth.eta_Y_crossover")(M=M, K=3, eta_Y=0.7)
    assert tc > rec("speed.scan_time")(M=M, K=3, eta_Y=0.7)
    assert (tc < rec("speed.snap_time")(M=M, K=3, eta_Y=0.7)) == (M >= 6)


def test_crossover_mpmath_agrees():
    assert float(rec("growth.eta_Y_crossover")("mpmath", M=1000, K=3, eta_Y=0.5)) == pytest.approx(
        rec("growth.eta_Y_crossover")(M=1000, K=3, eta_Y=0.5), rel=1e-13)


def test_values_are_the_asymptotic_forms_at_the_two_times():
    kw = dict(M=1000, K=10, eta_Y=2.0, eta_Z=0.5, C0=3.0)
    t0p = 10 * math.log(1000) / 2.0
    t0 = rec("speed.snap_time")(M=1000, K=10, eta_Y=2.0)
    assert rec("growth.value_scan_end")(**kw) == pytest.approx(rec("attention.growth_scanning")(t=t0p, **kw), rel=1e-13)
    assert rec("growth.value_snap")(**kw) == pytest.approx(rec("attention.growth_snapping")(t=t0, **kw), rel=1e-13)


def test_lnln_asymptote_remainder_vanishes_and_printed_keeps_the_offset():
    kw = dict(M=1000, K=10, eta_Y=1.0, eta_Z=0.5, C0=0.05)
    t = np.array([1e10, 1e50, 1e250])
    B = rec("attention.growth")(t=t, **kw)
    rem = np.abs(B - rec("growth.lnln_asymptote")(t=t, **kw))
    assert np.all(np.diff(rem) < 0) and rem[-1] < 1e-4
    assert abs(B[-1] - rec("growth.lnln_asymptote")(t=t[-1], printed=True, **kw)) == pytest.approx(
        abs(math.log(0.05)) / 4, abs=1e-4)


@pytest.mark.parametrize("K", [2, 4, 10])
def test_symmetric_rates_and_snap_constant(K):
    q = np.geomspace(1e-6, 1e-3, 4)
    xi, dz = rec("attention.symmetric_xi")(q=q, K=K), rec("attention.symmetric_common_rate")(q=q, K=K)
    assert np.allclose(dz, -(1 - q) * xi, rtol=1e-13)                      # eq. 100: dz = -(1 - f_l^2) xi
    assert np.allclose(xi / q**2, K - 1, rtol=2 * K * q[-1])                 # leading order (K-1) q^2
    rho0 = 7.0
    assert rec("attention.snap_constant")(rho0=rho0, K=K) == pytest.approx(rho0**4 / (K - 1), rel=1e-15)
    assert rec("attention.snap_constant")(rho0=rho0, K=K, printed=True) == pytest.approx(rho0**4 / K, rel=1e-15)


def test_shared_query_velocity_is_attention_velocity_on_the_support():
    classes = single_common(3, 4, common_weight=0.7)
    rng = np.random.default_rng(3)
    Z = np.zeros((classes.M, classes.M))
    sup = classes.P.sum(0) > 0
    Z[classes.psi[0], sup] = rng.normal(size=sup.sum())
    for scale in (1.0, 1 / 3):
        dZ, xi = attention_velocity(classes, Z, scale)
        v, xi2, _ = shared_query_velocity(classes.P[:, sup], Z[classes.psi[0], sup], scale)
        assert np.allclose(dZ[classes.psi[0], sup], v, atol=1e-15) and np.allclose(xi, xi2, atol=1e-15)


def test_single_common_vocabulary_pads_and_refuses_too_small():
    assert single_common(2, 3, vocabulary=50).M == 50
    with pytest.raises(ValueError, match="^vocabulary"):
        single_common(2, 3, vocabulary=5)


def test_population_growth_run_is_population_run_with_records():
    classes = single_common(3, 4)
    order = np.random.default_rng(0).integers(3, size=300)
    a = population_growth_run(classes, 1.0, 0.1, order)
    b = population_run(classes, 1.0, 0.1, 300, order=order)
    assert np.allclose(a["z"][-1], b["Z"][classes.psi[0]], rtol=1e-12, atol=1e-15)
    assert a["xi"].shape == (300, 3) and np.all(a["xi"][30:] > 0)           # Theorem 1(a) after a burn-in
    with pytest.raises(ValueError, match="^steps"):
        population_growth_run(classes, 1.0, 0.1, None)


def test_expected_step_population_is_deterministic_and_modified_decoder_differs():
    classes = single_common(3, 4, vocabulary=60)
    a = population_growth_run(classes, 1.0, 0.01, None, steps=200)
    b = population_growth_run(classes, 1.0, 0.01, None, steps=200)
    c = population_growth_run(classes, 1.0, 0.01, None, steps=200, modified=True)
    assert np.array_equal(a["z"], b["z"])
    assert c["z"][-1, 0] < a["z"][-1, 0] < 0                                # the modified decoder pushes the CT harder


def test_eq3_gradients_zero_row_sums_and_projector():
    rng = np.random.default_rng(1)
    Y, Z = rng.normal(size=(8, 8)), rng.normal(size=(8, 8))
    ctx = rng.integers(8, size=30)
    gY, gZ = eq3_gradients(Y, Z, ctx, 2, 5)
    assert np.abs(gY.sum(1)).max() < 1e-14 and np.abs(gZ.sum(1)).max() < 1e-14
    assert np.count_nonzero(np.abs(gZ).sum(1)) == 1
    _, bad = eq3_gradients(Y, Z, ctx, 2, 5, projector=False)
    assert np.abs(bad - gZ).max() > 1e-3
