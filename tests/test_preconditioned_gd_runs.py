"""Several training runs per check (verify.models.preconditioned_gd_runs): one problem draw per
run, the verdict over all; and the full-profile code path of every preconditioned_gd training
check on a tiny setting (the full sizes take hours on a CPU)."""

import numpy as np
import pytest

from verify.models.preconditioned_gd_runs import RUNS, over_problem_draws, run_context
from verify.models.preconditioned_gd_training import experiment_covariance
from verify.registry import Context, Control, Outcome

CID = "preconditioned_gd.multi_layer.torch_theorem3_sparse"


def _ctx(runs, seed=0):
    return Context(CID, profile="full", seed=seed, settings={"runs": runs})


def _body(fail_run=None, unrejected_run=None):
    seen = {}

    def body(ctx):
        Sigma = experiment_covariance(ctx)
        r = len(seen)
        seen[r] = (Sigma, ctx.rng.standard_normal())
        ratio = 2.0 if r == fail_run else 0.5
        ctrl = Control("wrong form", 0.0 if r == unrejected_run else 10.0, 1.0, expected=10.0)
        return Outcome(measured=r, predicted=0, discrepancy=ratio, tolerance=1.0, criterion="body",
                       controls=[ctrl], details={"r": r}, figures={"fig": {"kind": "lines"}})

    return body, seen


def test_the_setting_is_one_run_quick_and_the_papers_five_full():
    assert (RUNS.name, RUNS.quick, RUNS.full) == ("runs", 1, 5)


def test_one_run_returns_the_body_unchanged():
    body, seen = _body()
    out = over_problem_draws(_ctx(1), body)
    assert out.criterion == "body" and out.details == {"r": 0} and len(seen) == 1


def test_runs_draw_independent_problems_and_run0_is_the_checks_own_draw():
    body, seen = _body()
    out = over_problem_draws(_ctx(4), body)
    assert out.passed and out.tolerance == 1.0 and out.discrepancy == 0.5
    per = out.details["per run"]
    assert list(per) == [f"run {r}" for r in range(4)] and out.details["passed runs"] == [0, 1, 2, 3]
    sigmas = [np.asarray(per[f"run {r}"]["Sigma"]) for r in range(4)]
    for r in range(4):  # the body saw the recorded draw
        assert np.array_equal(seen[r][0], sigmas[r])
        assert np.allclose(per[f"run {r}"]["Sigma eigenvalues"], sorted((1.0, 1.0, 0.25, 0.0625, 1.0)))
    assert min(np.max(np.abs(a - b)) for i, a in enumerate(sigmas) for b in sigmas[i + 1:]) > 1e-3
    assert len({v[1] for v in seen.values()}) == 4            # independent streams after the draw
    # run 0 is what the check's own context draws, so one run and several agree on it
    ctx = _ctx(1)
    assert np.array_equal(experiment_covariance(ctx), sigmas[0])
    assert ctx.rng.standard_normal() == seen[0][1]
    # controls and figures of every run are kept
    assert [c.name for c in out.controls] == [f"run {r}: wrong form" for r in range(4)]
    assert set(out.figures) == {"fig", "run1_fig", "run2_fig", "run3_fig"}


def test_same_seed_same_runs_other_seed_other_runs():
    a = over_problem_draws(_ctx(3), _body()[0]).details["per run"]
    b = over_problem_draws(_ctx(3), _body()[0]).details["per run"]
    c = over_problem_draws(_ctx(3, seed=1), _body()[0]).details["per run"]
    assert all(a[k]["Sigma"] == b[k]["Sigma"] for k in a)
    assert all(a[k]["Sigma"] != c[k]["Sigma"] for k in a)


@pytest.mark.parametrize("fail,unrejected", [(2, None), (None, 1)])
def test_one_failing_run_fails_the_check(fail, unrejected):
    out = over_problem_draws(_ctx(3), _body(fail, unrejected)[0])
    assert not out.passed
    bad = fail if fail is not None else unrejected
    assert out.details["passed runs"] == [r for r in range(3) if r != bad]
    assert out.details["per run"][f"run {bad}"]["passed"] is False
    if fail is not None:
        assert out.discrepancy == 2.0 and out.details["worst run"] == fail


def test_run_context_validates_the_index():
    with pytest.raises(ValueError, match="^r: "):
        run_context(_ctx(2), -1)


# -- the full-profile code path of each training check, tiny -----------------------------------
def _tiny(monkeypatch, check_id):
    """The check's full-profile settings shrunk (a few steps, small batches; no torch.compile,
    one thread) and the ``--set`` values of a tiny run with two problem draws."""
    import verify.checks.preconditioned_gd.gdpp_torch as gd
    import verify.checks.preconditioned_gd.multi_layer_torch as ml
    import verify.checks.preconditioned_gd.single_layer_torch as sl

    small = dict(compile=False, threads=1)
    monkeypatch.setattr(ml, "SPARSE_FULL", dict(ml.SPARSE_FULL, **small))
    monkeypatch.setattr(gd, "GDPP_FULL", dict(gd.GDPP_FULL, **small))
    monkeypatch.setattr(sl, "FULL_FULL", dict(sl.FULL_FULL, **small))
    monkeypatch.setattr(ml, "FULL_ML_FULL", {2: dict(ml.FULL_ML_FULL[2], steps=8, batch=64, **small)})
    common = {"runs": 2, "samples": 2000}
    return {"preconditioned_gd.multi_layer.torch_theorem3_sparse": dict(common, L=(1,), steps=8, batch=64),
            "preconditioned_gd.gdpp.torch_theorem4": dict(common, L=2, steps=8, batch=64),
            "preconditioned_gd.single_layer.torch_theorem3_full": dict(common, steps=8, batch=64),
            "preconditioned_gd.multi_layer.torch_full_multilayer": common}[check_id]


@pytest.mark.parametrize("check_id", ["preconditioned_gd.multi_layer.torch_theorem3_sparse",
                                      "preconditioned_gd.gdpp.torch_theorem4",
                                      "preconditioned_gd.single_layer.torch_theorem3_full",
                                      "preconditioned_gd.multi_layer.torch_full_multilayer"])
def test_training_full_code_path_on_a_tiny_setting(monkeypatch, check_id):
    """The full profile's path (two problem draws, each trained and evaluated) runs to an outcome
    with every run reported; a few steps cannot converge, so the verdict itself is not tested."""
    pytest.importorskip("torch")
    from verify.registry import get_check, run_check

    chk = get_check(check_id)
    assert "runs" in [s.name for s in chk.settings]
    res = run_check(chk, profile="full", settings=_tiny(monkeypatch, check_id))
    assert res.error is None, res.traceback
    per = res.details["per run"]
    assert list(per) == ["run 0", "run 1"] and res.settings["runs"] == 2
    assert np.max(np.abs(np.subtract(per["run 0"]["Sigma"], per["run 1"]["Sigma"]))) > 1e-3
    assert all(np.isfinite(v["discrepancy / tolerance"]) or v["discrepancy / tolerance"] == np.inf
               for v in per.values())
    n_ctrl = len(per["run 0"]["controls"])
    assert n_ctrl > 0 and len(res.controls) == n_ctrl + len(per["run 1"]["controls"])
    assert res.criterion.startswith("every one of 2 runs passes")


def test_paired_losses_share_the_prompts_and_keep_paired_loss():
    """Several references on one draw of held-out prompts: the first estimate is paired_loss's for
    the same generator state, and every estimate pairs the model's own errors on the same prompts."""
    from verify.models.linear_transformer import general_layers, sparse_layers
    from verify.models.preconditioned_gd_training import paired_loss, paired_losses

    Sigma = np.diag([1.0, 0.5, 0.25])
    Sinv = np.linalg.inv(Sigma)
    model = sparse_layers(np.array([0.6, 1.4])[:, None, None] * Sinv)
    refs = [sparse_layers(np.array([0.5, 1.5])[:, None, None] * Sinv),
            general_layers(-np.array([0.5, 1.5])[:, None, None] * Sinv, 0.2 * np.ones(2)[:, None, None] * np.eye(3))]
    one = paired_loss(np.random.default_rng(5), Sigma, 8, 3000, model, refs[0], chunk=1000)
    both = paired_losses(np.random.default_rng(5), Sigma, 8, 3000, model, refs, chunk=1000)
    assert len(both) == 2
    np.testing.assert_array_equal(both[0].mean, one.mean)
    np.testing.assert_array_equal(both[0].se, one.se)
    assert both[1].mean[0] == both[0].mean[0]                   # the model's errors, same prompts
    assert both[1].mean[1] != both[0].mean[1]
    np.testing.assert_allclose(both[1].mean[2], both[1].mean[0] - both[1].mean[1], rtol=1e-12)
