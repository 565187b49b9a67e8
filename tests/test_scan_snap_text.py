"""SGD training of the real-text model of Scan and Snap (verify.models.scan_snap_text, Figs. 7 and 10) and
the statistics of its check."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from verify.checks.scan_snap import attention_text  # noqa: E402
from verify.models.localization_lm import PostLNTransformerLM  # noqa: E402
from verify.models.scan_snap_text import CLIP_NORM, train_sgd_lm  # noqa: E402


def _ids(n=800, vocab=12, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, size=n).astype(np.int64)


def _train(**kw):
    args = dict(d=8, T=6, batch=4, steps=8, lr=1.0, records=4)
    args.update(kw)
    return train_sgd_lm(_ids(), _ids(200, seed=1), 12, np.random.default_rng(3), torch.Generator().manual_seed(3),
                        **args)


def test_records_and_same_seed_same_result():
    a, b = _train(), _train()
    assert a["history"]["step"] == [0, 2, 4, 6, 8]
    assert a["entropy_windows"].shape == (5, 33)                  # 200 tokens -> (200 - 1) // 6 windows
    np.testing.assert_array_equal(a["entropy_windows"], b["entropy_windows"])
    np.testing.assert_allclose(a["entropy_windows"].mean(axis=1), a["history"]["entropy"])
    # at step 0 the attention is that of the initial weights
    H0 = a["entropy_windows"][0]
    assert np.all(H0 > 0) and np.all(H0 <= np.mean(np.log(np.arange(1, 7))) + 1e-9)


def test_one_step_is_clipped_sgd():
    """One step moves the weights by -lr * g * min(1, CLIP_NORM / |g|) (global norm)."""
    train, valid = _ids(), _ids(200, seed=1)
    g0 = torch.Generator().manual_seed(5)
    ref = PostLNTransformerLM(12, 8, 1, 6, generator=torch.Generator().manual_seed(5))
    from verify.tasks.text_corpus import sample_windows

    x, y = (torch.from_numpy(a) for a in sample_windows(np.random.default_rng(7), train, 6, 4))
    logits = ref(x)
    torch.nn.functional.cross_entropy(logits.reshape(-1, 12), y.reshape(-1)).backward()
    grads = [p.grad.clone() for p in ref.parameters()]
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
    assert norm > CLIP_NORM                                         # the clipping is active at this size
    expected = [p.detach() - 3.0 * g * CLIP_NORM / norm for p, g in zip(ref.parameters(), grads)]

    captured = {}
    orig = PostLNTransformerLM.__init__

    def spy(self, *a, **k):
        orig(self, *a, **k)
        captured["model"] = self

    try:
        PostLNTransformerLM.__init__ = spy
        train_sgd_lm(train, valid, 12, np.random.default_rng(7), g0, d=8, T=6, batch=4, steps=1, lr=3.0, records=1)
    finally:
        PostLNTransformerLM.__init__ = orig
    for p, e in zip(captured["model"].parameters(), expected):
        torch.testing.assert_close(p.detach(), e, rtol=1e-5, atol=1e-6)


def test_bad_arguments_raise_naming_them():
    for kw, name in ((dict(lr=0.0), "lr"), (dict(clip=-1.0), "clip"), (dict(steps=0), "steps"),
                     (dict(records=3), "records")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            _train(**kw)


def test_check_statistics():
    # share of the drop after a cut
    assert attention_text._phi([0, 1, 2, 3], [2.0, 1.0, 0.9, 0.8], 0, 1, 3) == pytest.approx(0.2 / 1.2)
    assert attention_text._phi([0, 1, 2], [1.0, 1.0, 1.0], 0, 1, 2) == math.inf
    m, se, z = attention_text._paired_z([1.0, 2.0, 3.0])
    assert (m, se, z) == pytest.approx((2.0, 1 / math.sqrt(3), 2 * math.sqrt(3)))
    run = {"entropy_windows": np.arange(20.0).reshape(5, 4)}          # 5 records: the last quarter is 2 records
    np.testing.assert_allclose(attention_text._late(run), [14.0, 15.0, 16.0, 17.0])


def test_check_full_profile_code_path_on_a_tiny_setting():
    # the full profile's path (two layer counts, three replicates with the over-replicate claims, a grid of
    # three eta) at tiny sizes: it runs and reports every claim and control
    from verify.registry import get_check, run_check

    chk = get_check("scan_snap.attention.torch_text_sparsity")
    res = run_check(chk, profile="full", seed=0, settings={
        "corpus": "pydoc", "vocab": "60", "d": "8", "L": "1,2", "T": "8", "batch": "4", "steps": "16",
        "eta": "0.5,1,2", "replicates": "3", "eval_windows": "16"})
    assert res.error is None, res.traceback
    claims = res.details["claims"]
    # per replicate: claim 1 per layer count and claim 3 per adjacent pair; the mean over replicates is reported
    assert len(claims) == 3 * (2 + 2) and res.details["z_threshold"]["tests"] == len(claims)
    assert [x["eta"] for x in res.details["over_replicates"]] == [[0.5, 1.0], [1.0, 2.0]]
    assert len(res.controls) == 3 * (2 + 1)
    assert res.discrepancy == sum(not c["holds"] for c in claims.values())
    rep = res.details["replicates"][0]
    assert len(rep["L=2"]["entropy"]["text"]) == 17 and set(rep["late_entropy"]) == {"0.5", "1", "2"}
    for kw, name in (({"eta": "2,1"}, "eta"), ({"steps": "20"}, "steps")):
        bad = run_check(chk, settings=kw)
        assert bad.error.startswith(f"ValueError: {name}: "), bad.error
