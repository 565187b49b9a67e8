"""The ATTN_S dynamics library (verify/flows/separate_ranks.py, verify/tasks/wishart.py,
verify/models/linear_attention_training.py)."""

import numpy as np
import pytest

from verify.flows.separate_ranks import (
    escape_correction,
    long_plateaus,
    midpoint_value_fraction,
)


def test_midpoint_fraction_halves_the_ansatz_drop():
    u = midpoint_value_fraction() ** 3
    assert 2 * u - u * u == pytest.approx(0.5, abs=1e-14)


def test_escape_correction_tends_to_one_with_slope_K():
    lam, a = 0.3, 0.3**2 * (1 + (1 + 1 / 0.3) / 31)
    v_star = (lam / a) ** (1 / 3)
    Ks = [(1 - escape_correction(lam, a, v0)) / (v0 / v_star) for v0 in (1e-3, 1e-4, 1e-5)]
    np.testing.assert_allclose(Ks, 1.2534, atol=2e-3)
    assert escape_correction(lam, a, 1e-6) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("kw, name", [({"lam": -1.0}, "lam"), ({"a": 0.0}, "a"), ({"v0": 10.0}, "v0"),
                                      ({"v0": 0.0}, "v0")])
def test_escape_correction_rejects_bad_input(kw, name):
    args = {"lam": 0.3, "a": 0.1, "v0": 1e-3} | kw
    with pytest.raises(ValueError, match=f"^{name}"):
        escape_correction(**args)


def test_long_plateaus_uses_the_escape_scale():
    lam = np.array([0.5, 0.25])
    w = 1e-2
    scale = 1 / (lam**2 * w)                      # 400, 1600
    long = long_plateaus([0.2 * scale[0], 0.05 * scale[1], 1e9], lam, w)
    assert long.tolist() == [True, False]


@pytest.mark.parametrize("args, name", [(([1, 2], [0.5, 0.2], 1e-2), "time_near"),
                                        (([1, 2, 3], [0.5, -0.2], 1e-2), "lam"),
                                        (([1, 2, 3], [0.5, 0.2], 0.0), "w_init")])
def test_long_plateaus_rejects_bad_input(args, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        long_plateaus(*args)


def test_literal_divides_pattern_is_the_wrong_way_round():
    from verify.flows.separate_ranks import literal_divides_pattern

    assert literal_divides_pattern(4, 2).tolist() == [False, True, True, False]
    assert literal_divides_pattern(8, 4).tolist() == [False, True, True, False, True, False, False, False]
    with pytest.raises(ValueError, match="^D"):
        literal_divides_pattern(0, 1)


def test_wishart_betas_have_the_moments_of_eq_29_31():
    # E[beta w^T] = E[Lambda_hat] = Lambda, E[beta beta^T] = E[Lambda_hat^2] (eq. 31)
    import theory
    from verify.stats import batch_mean, z_threshold
    from verify.tasks.wishart import sample_wishart_betas

    rng = np.random.default_rng(4)
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    Lam = (q * np.array([1.0, 0.5, 0.2])) @ q.T
    N = 5
    acc = batch_mean()
    for _ in range(4):
        beta, x_q, y_q, w = sample_wishart_betas(rng, Lam, N, 50_000)
        acc.add(np.concatenate([np.einsum("bi,bj->bij", beta, w).reshape(-1, 9),
                                np.einsum("bi,bj->bij", beta, beta).reshape(-1, 9),
                                (y_q - np.einsum("bd,bd->b", x_q, w))[:, None]], axis=1))
    est = acc.result()
    A = theory.get("linear_attention.data.lambda_hat_sq")(Lambda=Lam, N=N)
    z = est.z(np.concatenate([Lam.ravel(), np.asarray(A).ravel(), [0.0]]))
    assert np.max(np.abs(z)) < z_threshold(19)
    with pytest.raises(ValueError, match="^N"):
        sample_wishart_betas(rng, Lam, 2, 10)


def test_torch_ranks_from_the_environment_value():
    from verify.models.linear_attention_training import FULL_TRAINING, selected_ranks

    assert selected_ranks(FULL_TRAINING, None) == (1, 2, 4, 8)
    assert selected_ranks(FULL_TRAINING, "8") == (8,)
    assert selected_ranks(FULL_TRAINING, "4,1") == (1, 4)
    for bad in ("3", "8,8", "x"):
        with pytest.raises(ValueError, match="^ATTN_S_TORCH_RANKS"):
            selected_ranks(FULL_TRAINING, bad)


def _tiny_setting(max_steps=20_000):
    from verify.models.linear_attention_training import TrainingSetting

    return TrainingSetting("tiny: D=2, N=7, H=2", D=2, N=7, H=2, ranks=(1, 2), eig=(2.0, 1.0),
                           w_init=5e-2, eta=0.2, batch=500, log_every=5, max_steps=max_steps)


def test_torch_training_full_code_path_on_a_tiny_setting():
    # the full-profile path (several ranks, one spawned stream per rank, horizon from the flow,
    # log_every > 1) with reduced sizes; a rank run alone starts from the same draw
    pytest.importorskip("torch")
    from verify.models.linear_attention_training import RUN_PAST_LAST_DROP, run_training
    from verify.registry import Context

    cid = "linear_attention.separate.torch_training"
    out = run_training(Context(cid, profile="full"), _tiny_setting())
    assert np.isfinite(out.discrepancy)
    per = out.details["per_rank"]
    assert set(per) == {"R=1", "R=2"}
    for r in per.values():
        assert r["flow_drops_reached"] == 2
        assert r["steps"] == int(np.ceil(RUN_PAST_LAST_DROP * r["flow_last_drop"] / (2 * 0.2)))
        assert max(r["drops_flow"]) < 2 * 0.2 * r["steps"]
    alone = run_training(Context(cid, profile="full"), _tiny_setting(), ranks=(2,))
    assert alone.details["per_rank"]["R=2"]["drops_flow"] == per["R=2"]["drops_flow"]


def test_torch_training_horizon_cap_is_an_error():
    pytest.importorskip("torch")
    from verify.models.linear_attention_training import run_training
    from verify.registry import Context

    with pytest.raises(RuntimeError, match="^horizon"):
        run_training(Context("linear_attention.separate.torch_training", profile="full"),
                     _tiny_setting(max_steps=20), ranks=(1,))


def test_torch_training_float32_setting_and_bad_dtype():
    # the full profile trains in float32; the same tiny setting in float32 makes the same
    # drops (the logged loss is evaluated in float64 from the effective matrix)
    pytest.importorskip("torch")
    import dataclasses

    from verify.models.linear_attention_training import FULL_TRAINING, run_training
    from verify.registry import Context

    assert FULL_TRAINING.dtype == "float32"
    cid = "linear_attention.separate.torch_training"
    tiny32 = dataclasses.replace(_tiny_setting(), dtype="float32")
    out = run_training(Context(cid, profile="full"), tiny32, ranks=(1,))
    assert out.details["dtype"] == "float32"
    r = out.details["per_rank"]["R=1"]
    assert np.all(np.isfinite(r["drops_torch"]))
    np.testing.assert_allclose(r["drops_torch"], r["drops_flow"], rtol=0.2)
    with pytest.raises(ValueError, match="^setting.dtype"):
        run_training(Context(cid, profile="full"), dataclasses.replace(_tiny_setting(), dtype="half"),
                     ranks=(1,))


def test_resolvable_drops_merges_crossings_without_a_block_between():
    """(fewest, most) drops a block-mean counter can see: crossings in the same or adjacent blocks
    are one (quick-profile seed 8: t = 212 and 245 with blocks of 40); 1-3 blocks apart one or
    two; a crossing in block 0 none, in block 1 none or one."""
    from verify.models.linear_attention_training import resolvable_drops

    nan = float("nan")
    assert resolvable_drops([212.2, 244.6, nan], 40.0) == (1, 1)  # blocks 5, 6
    assert resolvable_drops([157.6, 227.7, 999.0], 40.0) == (2, 3)  # 1.75 blocks apart, then 19
    assert resolvable_drops([157.6, 357.7, 999.0], 40.0) == (3, 3)  # 5 blocks apart
    assert resolvable_drops([nan, nan, nan], 40.0) == (0, 0)
    assert resolvable_drops([10.0, 50.0, 90.0], 40.0) == (1, 1)  # blocks 0, 1, 2: one run after block 0
    assert resolvable_drops([50.0, 400.0], 40.0) == (1, 2)  # block 1: maybe in the unseen first decrease


def test_count_drops_never_counts_the_first_decrease():
    """The start's relaxation within the first block (2.5 % here) is not a drop; the two drops
    after slower blocks are, at the blocks where the decrease peaks."""
    from verify.models.linear_attention_training import count_drops

    means = [1.0, 0.975, 0.975, 0.975, 0.6, 0.6, 0.6, 0.6, 0.3, 0.3, 0.3]
    n, info = count_drops(np.repeat(means, 10), 10, min_drop=0.02)
    assert n == 2 and info["peak_blocks"] == [3, 7]
    assert np.allclose(info["peak_decreases"], [0.375, 0.3])


def test_count_drops_ignores_block_noise_and_finds_real_drops():
    """Fresh-batch noise (per-step sd 0.05, blocks of 100: block means to 0.005) makes the running
    minimum of the first blocks fall by a few standard errors, past a small min_drop (0.005; a
    counter without the noise threshold counts one such drop at about half the draws); those are
    not drops at any of 20 draws, while real drops of 0.1 and 0.3 after slower phases are found
    at all of them."""
    from verify.models.linear_attention_training import count_drops

    level = np.repeat([1.0, 0.9, 0.6], [2000, 2000, 2000])
    for seed in range(20):
        noise = np.random.default_rng(seed).normal(0.0, 0.05, level.size)
        assert count_drops(1.0 + noise, 100, min_drop=0.005)[0] == 0
        n, info = count_drops(level + noise, 100, min_drop=0.005)
        assert n == 2 and info["peak_blocks"] == [19, 39], (seed, info["peak_blocks"])


def test_count_drops_counts_a_smooth_abrupt_drop_once():
    """A noiseless sigmoid drop (the exact flow's loss of the merged model: one abrupt drop, §3)
    is one drop: its steepest block does not raise the noise threshold."""
    from verify.models.linear_attention_training import count_drops

    k = np.arange(6000)
    curve = 1.0 - 0.4 / (1.0 + np.exp(-(k - 3000) / 60.0))
    n, info = count_drops(curve, 100, min_drop=0.02)
    assert n == 1 and info["peak_blocks"] in ([29], [30])
