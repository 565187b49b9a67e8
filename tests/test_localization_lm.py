"""The Post-LN language model of Sec. 7 (verify.models.localization_lm), its training with LOCATER,
the stationary scale of the regulariser, and the full-profile path of the check on a tiny setting."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import theory  # noqa: E402
from verify.models.localization import signal_propagation_frequency  # noqa: E402
from verify.models.localization_lm import (FlatAdamW, PostLNTransformerLM, evaluate, flat_gradient,  # noqa: E402
                                           flat_parameters, train_locater_lm)
from verify.tasks.text_corpus import Corpus  # noqa: E402


def _toy_corpus(n=3000, vocab=20, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=n).astype(np.int64)
    return Corpus("toy", tuple(f"w{i}" for i in range(vocab)), ids[: n // 2], ids[n // 2: 3 * n // 4], ids[3 * n // 4:])


def test_model_is_causal_and_returns_the_first_block_attention():
    model = PostLNTransformerLM(20, 8, layers=2, T_max=10, generator=torch.Generator().manual_seed(0))
    ids = torch.randint(0, 20, (3, 10), generator=torch.Generator().manual_seed(1))
    logits, A, omega = model(ids, return_attention=True)
    assert logits.shape == (3, 10, 20) and A.shape == (3, 10, 10) and omega.shape == (3, 10)
    torch.testing.assert_close(A.sum(-1), torch.ones(3, 10))
    assert torch.all(A.triu(1) == 0)                               # no weight on future keys
    changed = ids.clone()
    changed[:, 7] = (changed[:, 7] + 1) % 20
    torch.testing.assert_close(model(changed)[:, :7], logits[:, :7])  # earlier positions do not see token 7
    # omega: the last query's scores, q_T . k_s / sqrt(d) with the biases
    x = model.embed[ids] * math.sqrt(8) + model.positions[:10]
    q = x[:, -1] @ model.W_Q[0].T + model.b_Q[0]
    k = x @ model.W_K[0].T + model.b_K[0]
    torch.testing.assert_close(omega, (k @ q[:, :, None]).squeeze(-1) / math.sqrt(8))
    torch.testing.assert_close(model.qk(1), model.W_Q[1].T @ model.W_K[1])
    W = [model.qk(l) for l in range(2)]
    expected = sum(2.0 * (w * w).sum() + 0.5 * (torch.trace(w) - 1) ** 2 for w in W)
    torch.testing.assert_close(model.locater(2.0, 0.5), expected)


def test_bad_model_arguments_raise_naming_them():
    with pytest.raises(ValueError, match="^d: "):
        PostLNTransformerLM(20, 7)
    with pytest.raises(ValueError, match="^vocab_size: "):
        PostLNTransformerLM(1, 8)
    with pytest.raises(ValueError, match="^layers: "):
        PostLNTransformerLM(20, 8, layers=0)
    with pytest.raises(ValueError, match="^ids: "):
        PostLNTransformerLM(20, 8, T_max=4)(torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="^kappa2: "):
        train_locater_lm(_toy_corpus(), np.random.default_rng(0), torch.Generator(), d=8, T=4, batch=2, steps=1,
                         kappa2=-1.0)


def test_signal_propagation_frequency_counts_u_in_the_unit_interval():
    # u_i = omega_i / T - sum omega / T^2 + 1 / T is in [0, 1] iff omega_i - mean(omega) in [-1, T - 1]
    omega = torch.tensor([[0.0, 0.0, 0.0, 0.0], [-3.0, 1.0, 1.0, 1.0], [10.0, 0.0, 0.0, 0.0]])
    # row 2: mean 0, deviations (-3, 1, 1, 1); row 3: mean 2.5, deviations (7.5, -2.5, -2.5, -2.5)
    torch.testing.assert_close(signal_propagation_frequency(omega), torch.tensor([1 / 3, 2 / 3, 2 / 3, 2 / 3]))
    assert torch.all(signal_propagation_frequency(torch.zeros(5, 7)) == 1)


def test_training_is_deterministic_and_records_the_statistics():
    corpus = _toy_corpus()
    kw = dict(d=8, T=6, batch=4, steps=6, lr=1e-2, kappa1=1.0, kappa2=0.5, record_every=2, eval_windows_max=20)
    runs = [train_locater_lm(corpus, np.random.default_rng(3), torch.Generator().manual_seed(3), **kw)
            for _ in range(2)]
    assert runs[0] == runs[1]
    h, f = runs[0]["history"], runs[0]["final"]
    assert h["step"] == [0, 2, 4, 6] and len(h["rho"][0]) == 6
    assert f["windows"] == 20 and len(f["ce_windows"]) == 20
    assert f["perplexity"] == pytest.approx(math.exp(f["ce"]))
    assert f["ce"] == pytest.approx(np.mean(f["ce_windows"]))
    # uniform attention over t keys has entropy ln t: the mean over queries is at most the mean of ln t
    assert 0 < f["entropy_all"] <= np.mean(np.log(np.arange(1, 7))) + 1e-9


def test_evaluate_of_a_model_with_zero_qk_attends_uniformly():
    corpus = _toy_corpus()
    model = PostLNTransformerLM(20, 8, T_max=6, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for p in (model.W_Q[0], model.W_K[0], model.b_Q[0], model.b_K[0]):
            p.zero_()
    out = evaluate(model, corpus.valid, 6)
    assert out["entropy_last"] == pytest.approx(math.log(6), abs=1e-6)
    assert out["rho"] == [1.0] * 6


def test_stationary_scale_holds_at_the_regulariser_stationary_points():
    # gradient descent on the regulariser alone over (W_Q, W_K) from a random start ends at a stationary
    # point, whose scale the record predicts from its trace
    cf = theory.get("localization.locater.stationary_scale")
    rng = np.random.default_rng(0)
    for k1, k2, d in ((1.0, 3.0, 3), (2.0, 0.5, 4), (10.0, 1.0, 4)):
        Wq, Wk = (torch.tensor(rng.standard_normal((d, d)) * 0.3, requires_grad=True) for _ in range(2))
        opt = torch.optim.LBFGS([Wq, Wk], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-16,
                                line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            W = Wq.T @ Wk
            loss = k1 * (W * W).sum() + k2 * (torch.trace(W) - 1) ** 2
            loss.backward()
            return loss

        opt.step(closure)
        W = (Wq.T @ Wk).detach()
        t = float(torch.trace(W))
        assert float((W * W).sum()) == pytest.approx(cf(trW_QK=t, kappa1=k1, kappa2=k2), rel=1e-6)
        # the global minimiser a I has t = d k2 / (k1 + d k2); training may end at a lower rank, never higher
        assert t <= d * k2 / (k1 + d * k2) + 1e-9


def test_check_full_profile_code_path_on_a_tiny_setting():
    # the full profile's path (several layer counts, a kappa2 grid of five, every validation window) at
    # tiny sizes: it runs and reports every claim and control per layer count
    from verify.registry import get_check, run_check

    chk = get_check("localization.locater.torch_language_model")
    res = run_check(chk, profile="full", seed=0, settings={
        "corpus": "pydoc", "vocab": "60", "d": "8", "L": "1,2", "T": "8", "batch": "4", "steps": "12",
        "lr": "1e-2", "kappa2": "0,0.001,0.01,0.1,1", "eval_windows": "16"})
    assert res.error is None, res.traceback
    assert res.settings["L"] == [1, 2] and res.details["protocol"]["kappa2"] == [0.0, 0.001, 0.01, 0.1, 1.0]
    claims = res.details["claims"]
    assert sum(k.startswith("L=1: ") for k in claims) == sum(k.startswith("L=2: ") for k in claims) == 8
    assert len(res.controls) == 14
    assert res.discrepancy == sum(not c["holds"] for c in claims.values())
    for layers in (1, 2):
        numbers = res.details[f"layers_{layers}"]
        assert len(numbers["scale"]["LOCATER"]) == 5 and numbers["windows"] == 16
    assert {"scale_L2", "entropy_L2", "ce_L2", "rho_L2"} <= set(res.figures)
    bad = run_check(chk, settings={"kappa2": "1,0"})
    assert bad.error.startswith("ValueError: kappa2: ")


def test_attention_only_evaluation_gives_the_same_statistics():
    corpus = Corpus("toy", ("<unk>",) + tuple(f"w{i}" for i in range(11)), *(np.random.default_rng(i).integers(
        0, 12, size=n).astype(np.int64) for i, n in ((0, 400), (1, 150), (2, 50))))
    for layers in (1, 2):
        model = PostLNTransformerLM(12, 8, layers, 6, generator=torch.Generator().manual_seed(layers))
        full, first = evaluate(model, corpus.valid, 6, chunk=7), evaluate(model, corpus.valid, 6, chunk=7, ce=False)
        assert set(full) - set(first) == {"ce", "perplexity", "ce_windows"}
        for k, v in first.items():
            assert v == full[k], k                  # the same operations on the first block: identical


@pytest.mark.parametrize("optimiser", ["adamw", "sgd_clipped"])
def test_flat_parameter_steps_equal_torch_optimisers_per_parameter(optimiser):
    """One optimiser step on the parameters laid end to end (flat_parameters: what the LOCATER and
    text-sparsity trainers do) gives the same parameters as torch's optimiser over the model's
    parameters, step after step (AdamW; SGD after clip_grad_norm_)."""
    def model():
        return PostLNTransformerLM(20, 8, layers=2, T_max=10, generator=torch.Generator().manual_seed(0))

    ref, flat_model = model(), model()
    flat, params = flat_parameters(flat_model)
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(ref.parameters(), params))
    if optimiser == "adamw":
        opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.01, foreach=True)
        opt = torch.optim.AdamW([flat], lr=1e-2, weight_decay=0.01, foreach=True)
    else:
        opt_ref, opt = torch.optim.SGD(ref.parameters(), lr=0.5), torch.optim.SGD([flat], lr=0.5)
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        ids = torch.randint(0, 20, (3, 10), generator=gen)
        opt_ref.zero_grad()
        ref(ids).square().mean().backward()
        flat_model(ids).square().mean().backward()
        if optimiser == "sgd_clipped":
            torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.01)
        flat_gradient(flat, params, 0.01 if optimiser == "sgd_clipped" else None)
        assert all(p.grad is None for p in params)
        opt_ref.step()
        opt.step()
        for a, b in zip(ref.parameters(), flat_model.parameters()):
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
    assert not torch.equal(next(ref.parameters()), next(model().parameters()))   # the steps moved them


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_flat_adamw_equals_torch_adamw_to_the_bit(weight_decay):
    """FlatAdamW on the flat buffer, fed flat_gradient(loss=...), leaves the same parameters to the bit
    as torch's AdamW (foreach) after .backward() and flat_gradient, step after step."""
    def model():
        return PostLNTransformerLM(20, 8, layers=2, T_max=10, generator=torch.Generator().manual_seed(0))

    ref_model, new_model = model(), model()
    ref_flat, ref_params = flat_parameters(ref_model)
    flat, params = flat_parameters(new_model)
    opt_ref = torch.optim.AdamW([ref_flat], lr=1e-2, weight_decay=weight_decay, foreach=True)
    opt = FlatAdamW(flat, lr=1e-2, weight_decay=weight_decay)
    buf = torch.empty_like(flat.detach())
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        ids = torch.randint(0, 20, (3, 10), generator=gen)
        ref_model(ids).square().mean().backward()
        flat_gradient(ref_flat, ref_params)
        opt_ref.step()
        g = flat_gradient(flat, params, loss=new_model(ids).square().mean(), out=buf)
        assert g.data_ptr() == buf.data_ptr() and all(p.grad is None for p in params)
        opt.step(g)
        assert torch.equal(flat, ref_flat)
    assert not torch.equal(flat, flat_parameters(model())[0])   # the steps moved them
