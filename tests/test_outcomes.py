"""Outcome builders (verify/outcomes.py) and the JSON sanitiser (verify/jsonable.py)."""

import json

import numpy as np
import pytest

import verify
from verify.jsonable import to_jsonable
from verify.outcomes import exact_control, exact_identity, z_control, z_score, z_test
from verify.registry import Check, run_check
from verify.stats import MeanEstimate, batch_mean, z_threshold


def _estimate(rng, mean, n=20_000):
    acc = batch_mean()
    acc.add(rng.normal(mean, 1.0, size=(n, len(mean))))
    return acc.result()


def _run(outcome):
    return run_check(Check("test.outcomes", "t", (), "monte_carlo", lambda ctx: outcome))


def test_z_test_passes_with_the_family_threshold_and_a_rejected_control():
    rng = np.random.default_rng(0)
    truth = np.array([1.0, -0.5, 0.25])
    est = _estimate(rng, truth)
    wrong = truth + 0.2                                # 0.2 / (1/sqrt(2e4)) ~ 28 standard errors
    out = z_test(est, truth, criterion="max |z| over 3 means",
                 controls=[z_control("shifted by 0.2", est, wrong, truth)])
    assert out.tolerance == z_threshold(3)
    assert out.discrepancy == pytest.approx(float(np.max(np.abs((est.mean - truth) / est.se))), rel=1e-15)
    assert out.passed and out.measured == est.mean.tolist() and out.predicted == truth.tolist()
    (ctrl,) = out.controls
    assert ctrl.rejected and ctrl.tolerance == z_threshold(3)
    assert ctrl.expected == pytest.approx(float(np.max(0.2 / est.se)))
    res = _run(out)
    assert res.passed and res.controls[0]["rejected"]


def test_z_test_fails_when_the_prediction_is_off():
    rng = np.random.default_rng(1)
    est = _estimate(rng, np.zeros(4))
    out = z_test(est, np.full(4, 0.1), n_tests=10, criterion="off by 0.1")
    assert out.tolerance == z_threshold(10)
    assert out.discrepancy > out.tolerance and not out.passed
    assert not _run(out).passed


def test_a_control_that_is_not_rejected_fails_the_check():
    rng = np.random.default_rng(2)
    truth = np.array([0.3, 0.7])
    est = _estimate(rng, truth)
    # a "wrong" form indistinguishable from the truth at this sample size
    ctrl = z_control("too close to tell", est, truth + 1e-6, truth)
    assert not ctrl.rejected
    out = z_test(est, truth, criterion="c", controls=[ctrl])
    assert out.passed
    assert not _run(out).passed


def test_z_test_takes_a_mean_and_se_pair_and_reports_what_it_is_told():
    out = z_test(([1.0, 2.0], [0.1, 0.1]), [1.0, 2.3], criterion="c",
                 report_measured={"a": 1}, report_predicted="p", details={"n": 3})
    assert out.discrepancy == pytest.approx(3.0)
    assert out.measured == {"a": 1} and out.predicted == "p" and out.details == {"n": 3}
    assert z_score(1.3, 0.1, 1.0) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="^measured"):
        z_test(1.0, 1.0, criterion="c")


def test_exact_identity_pass_and_fail():
    a = np.array([1.0, 2.0, -4.0])
    ok = exact_identity(a * (1 + 1e-15), a, tolerance=1e-12, criterion="round-off",
                        controls=[exact_control("doubled", a, 2 * a, 1e-12)])
    assert ok.passed and ok.discrepancy <= 1e-12 and ok.controls[0].rejected
    assert _run(ok).passed
    bad = exact_identity(a + 1e-6, a, tolerance=1e-12, criterion="round-off")
    assert not bad.passed and bad.discrepancy == pytest.approx(1e-6 / 4)
    # with a scale: the error relative to max(max |b|, scale)
    floor = exact_identity([1e-9], [0.0], tolerance=1e-6, criterion="floor", scale=1.0)
    assert floor.passed and floor.discrepancy == pytest.approx(1e-9)


def test_builders_are_part_of_the_extension_api():
    assert verify.z_test is z_test and verify.exact_identity is exact_identity
    assert {"z_test", "z_control", "exact_identity", "exact_control"} <= set(verify.__all__)


def test_to_jsonable_makes_strict_json():
    torch = pytest.importorskip("torch")
    x = {1: (np.float64(np.nan), np.int64(3), np.bool_(True)), "a": np.array([[1.0, np.inf]]),
         "t": torch.tensor(2.5), "tt": torch.tensor([1.0, -np.inf]), "o": object, "s": "x", "n": None,
         "f": -np.inf, "b": False}
    flags = []
    out = to_jsonable(x, flags)
    json.dumps(out, allow_nan=False)
    # non-finite numbers are null, and where they were and what they were is kept
    assert out["1"] == [None, 3, True]
    assert out["a"] == [[1.0, None]] and out["t"] == 2.5 and out["tt"] == [1.0, None]
    assert out["o"] == str(object) and out["s"] == "x" and out["n"] is None
    assert out["f"] is None and out["b"] is False
    assert dict(flags) == {"1[0]": "nan", "a[0][1]": "inf", "tt[1]": "-inf", "f": "-inf"}
    assert to_jsonable(MeanEstimate(np.zeros(1), np.ones(1), 2)).startswith("MeanEstimate(")
