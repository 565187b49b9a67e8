"""Unit tests of the decoder/attention records of Scan and Snap (Tian et al. 2023, Lemma 5,
Theorems 2-4) and of the models in verify.models.scan_snap."""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from verify.models.scan_snap import (OneLayerTransformer, SequenceClasses, attention_velocity, decoder_run,
                                     dt_entropy, population_run, single_common, syn_small)


def rec(name):
    return theory.get(f"scan_snap.{name}")


BN = dict(M=st.integers(2, 10**4), K=st.integers(1, 50), eta_Y=st.floats(1e-3, 10.0),
          eta_Z=st.floats(1e-3, 10.0), C0=st.floats(1e-3, 1e3))


# -- Theorem 4 ------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(**BN)
def test_growth_vanishes_at_zero_and_printed_does_not(M, K, eta_Y, eta_Z, C0):
    kw = dict(t=0.0, M=M, K=K, eta_Y=eta_Y, eta_Z=eta_Z, C0=C0)
    assert rec("attention.growth")(**kw) == 0.0
    assert rec("attention.growth_literal")(**kw) == 0.0
    assert rec("attention.common_logit")(**kw) == 0.0
    assert rec("attention.growth_printed")(**kw) == pytest.approx(math.log(C0) / 4, rel=1e-14, abs=1e-15)


@settings(max_examples=30, deadline=None)
@given(**BN)
def test_growth_monotone_and_printed_offset(M, K, eta_Y, eta_Z, C0):
    t = np.concatenate([[0.0], np.geomspace(1e-3, 1e9, 60)])
    kw = dict(t=t, M=M, K=K, eta_Y=eta_Y, eta_Z=eta_Z, C0=C0)
    B = rec("attention.growth")(**kw)
    assert np.all(np.isfinite(B)) and np.all(np.diff(B) >= 0)
    assert np.all(np.diff(rec("attention.common_logit")(**kw)) <= 0)
    gap = rec("attention.growth_printed")(**kw) - B
    np.testing.assert_allclose(gap, math.log(C0) / 4, rtol=0, atol=1e-12 * (1 + np.max(np.abs(B))))


@settings(max_examples=30, deadline=None)
@given(**BN, t=st.floats(0.0, 1e9))
def test_literal_reading_is_the_averaged_one_at_K_eta_Z(M, K, eta_Y, eta_Z, C0, t):
    """Gamma is linear in eta_Z: the literal sum equals the average with eta_Z -> K eta_Z (B divided by K)."""
    kw = dict(t=t, M=M, K=K, eta_Y=eta_Y, eta_Z=eta_Z, C0=C0)
    kwK = {**kw, "eta_Z": K * eta_Z}
    assert rec("attention.growth_literal")(**kw) == pytest.approx(rec("attention.growth")(**kwK) / K,
                                                                  rel=1e-13, abs=1e-300)
    assert rec("attention.common_logit_literal")(**kw) == pytest.approx(rec("attention.common_logit")(**kwK),
                                                                        rel=1e-13, abs=1e-300)
    assert rec("attention.growth_literal")(**kw) <= rec("attention.growth")(**kw) * (1 + 1e-13)


@settings(max_examples=20, deadline=None)
@given(**BN, t=st.floats(1e-6, 1e9))
def test_numpy_matches_mpmath(M, K, eta_Y, eta_Z, C0, t):
    kw = dict(t=t, M=M, K=K, eta_Y=eta_Y, eta_Z=eta_Z, C0=C0)
    for name in ("growth", "growth_literal", "common_logit", "growth_printed"):
        with mpmath.workdps(40):
            ref = float(rec(f"attention.{name}")("mpmath", **kw))
        assert rec(f"attention.{name}")(**kw) == pytest.approx(ref, rel=1e-11, abs=1e-300)


def test_growth_matches_emitted_expression():
    """The evaluate path (log1p in each backend) against the sympy expression emitted in h."""
    cf = rec("attention.growth")
    kw = dict(t=np.array([0.5, 30.0, 4e4]), M=40, K=3, eta_Y=0.7, eta_Z=0.2, C0=2.5)
    h = rec("h.continuous")(t=kw["t"] / kw["K"], M=kw["M"], eta_Y=kw["eta_Y"])
    direct = cf.function("numpy")(kw["t"], kw["M"], kw["K"], kw["eta_Y"], kw["eta_Z"], kw["C0"], h, None)
    np.testing.assert_allclose(cf(**kw), direct, rtol=1e-13)
    torch_val = cf("torch", **kw).numpy()
    np.testing.assert_allclose(torch_val, direct, rtol=1e-13)


def test_eq14_regimes_approach_the_exact_form():
    kw = dict(M=1000, K=10, eta_Y=1.0, eta_Z=0.5, C0=0.1)
    t0p = 10 * math.log(1000)
    B = lambda t: rec("attention.growth")(t=t, **kw)  # noqa: E731
    assert abs(rec("attention.growth_scanning")(t=1e-2 * t0p, **kw) / B(1e-2 * t0p) - 1) < 1e-4
    assert abs(rec("attention.growth_snapping")(t=1e7, **kw) / B(1e7) - 1) < 1e-3
    # the printed forms keep the ln(C0)/4 offset
    for name, t in (("growth_scanning", 1e-2 * t0p), ("growth_snapping", 1e7)):
        cf = rec(f"attention.{name}")
        assert cf(printed=True, t=t, **kw) - cf(t=t, **kw) == pytest.approx(math.log(0.1) / 4, rel=1e-9)


# -- Theorems 2, 3 ----------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(r0=st.floats(1e-3, 1e3), a=st.floats(0.0, 5.0), b=st.floats(0.0, 5.0))
def test_relative_gain_composes(r0, a, b):
    """r(0) chi over [0, a + b] = (r(0) chi over [0, a]) chi over [a, a + b]."""
    g = rec("attention.relative_gain")
    assert g(r0=g(r0=r0, dz=a), dz=b) == pytest.approx(g(r0=r0, dz=a + b), rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.floats(1e-3, 1.0), st.floats(1e-3, 1.0))
def test_common_pair_term_nonpositive(fa, fb):
    v = rec("attention.common_pair_term")(f_nl=fa, f_npl=fb)
    assert v <= 0
    # the direct form cancels near f_nl = 1 (absolute round-off ~ eps f_npl)
    assert v == pytest.approx(fa * (fa * fb * fa - fb), rel=1e-12, abs=4e-16 * fb)


# -- Lemma 5 ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("M, eta", [(5, 0.3), (50, 1.5)])
def test_decoder_records_match_the_iteration(M, eta):
    f = np.full(4, 0.5)
    w, alpha = decoder_run(M, eta, 40, f, label=2)
    for s in (1, 7, 40):
        kw = dict(s=s, M=M, eta_Y=eta)
        assert rec("decoder.label_logit")(**kw) == pytest.approx(w[s, 2], rel=1e-13)
        assert rec("decoder.alpha_correct")(**kw) == pytest.approx(alpha[s - 1, 2], rel=1e-13)
        assert rec("decoder.residual")(**kw) == pytest.approx(1 - alpha[s - 1, 2], rel=1e-12)
    assert rec("decoder.alpha_correct")(s=1, M=M, eta_Y=eta) == pytest.approx(1 / M, rel=1e-15)


# -- bad input --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, kw, param", [
    ("attention.growth", dict(t=-1.0, M=30, K=3, eta_Y=0.5, eta_Z=0.3, C0=1.2), "t"),
    ("attention.growth", dict(t=1.0, M=1, K=3, eta_Y=0.5, eta_Z=0.3, C0=1.2), "M"),
    ("attention.growth", dict(t=1.0, M=30, K=0, eta_Y=0.5, eta_Z=0.3, C0=1.2), "K"),
    ("attention.growth_literal", dict(t=1.0, M=30, K=3, eta_Y=0.5, eta_Z=0.3, C0=0.0), "C0"),
    ("attention.growth_snapping", dict(t=0.0, M=30, K=3, eta_Y=0.5, eta_Z=0.3, C0=1.2), "t"),
    ("attention.common_pair_term", dict(f_nl=1.5, f_npl=0.2), "f_nl"),
    ("decoder.alpha_correct", dict(s=0, M=30, eta_Y=0.5), "s"),
    ("attention.relative_gain", dict(r0=0.5, dz=-1.0), "dz"),
])
def test_bad_input_names_the_parameter(name, kw, param):
    with pytest.raises(ValueError, match=f"^{param}:"):
        rec(name)(**kw)


def test_models_reject_bad_input():
    with pytest.raises(ValueError, match="^P:"):
        SequenceClasses(np.array([[0.5, 0.6, 0.0]]), [2], [2])
    with pytest.raises(ValueError, match="^psi:"):
        SequenceClasses(np.array([[0.5, 0.5, 0.0]]), [3], [2])
    with pytest.raises(ValueError, match="^init:"):
        OneLayerTransformer(5, init="ones")
    with pytest.raises(ValueError, match="^T:"):
        syn_small().sample(4, 1)


# -- models -------------------------------------------------------------------------------------------------
def test_data_model_masks():
    cl = syn_small()
    assert (cl.K, cl.M) == (2, 34)
    assert cl.common.sum(1).tolist() == [10, 10] and cl.distinct.sum(1).tolist() == [10, 10]
    c = cl.attention(np.zeros((34, 34)))
    np.testing.assert_allclose(c, cl.P)
    q = np.linspace(0.1, 1.0, 10) / 5.5  # distinct weights renormalised
    np.testing.assert_allclose(dt_entropy(c, cl), -np.sum(q * np.log(q)), rtol=1e-14)


def test_transformer_shapes_and_zero_init_loss():
    import torch

    cl = syn_small()
    g = torch.Generator().manual_seed(0)
    model = OneLayerTransformer(cl.M, generator=g)
    context, query, label, cls = cl.sample(8, 20, g)
    assert context.shape == (8, 19) and query.shape == label.shape == cls.shape == (8,)
    logits, b = model(context, query)
    assert logits.shape == (8, cl.M) and b.shape == (8, 19)
    loss = torch.nn.functional.cross_entropy(logits, label)
    assert float(loss.detach()) == pytest.approx(math.log(cl.M), rel=1e-15)
    Y, Z = model.logit_matrices()
    assert np.max(np.abs(Y)) == 0 and np.max(np.abs(Z)) == 0


def test_transformer_matches_the_reparameterisation():
    """With orthonormal U, logits = Y^T LN(X^T b) and b = softmax over z_{x_T, x_t} (eq. 15)."""
    import torch

    cl = single_common(2, 3)
    g = torch.Generator().manual_seed(1)
    model = OneLayerTransformer(cl.M, init="random", generator=g)
    context, query, _, _ = cl.sample(5, 9, g)
    logits, b = model(context, query)
    Y, Z = model.logit_matrices()
    X = np.eye(cl.M)[context.numpy()]  # (B, T-1, M)
    zrow = Z[query.numpy()]  # (B, M)
    a = np.einsum("btm,bm->bt", X, zrow)
    bb = np.exp(a - a.max(1, keepdims=True))
    bb /= bb.sum(1, keepdims=True)
    np.testing.assert_allclose(b.detach().numpy(), bb, rtol=1e-12)
    xb = np.einsum("btm,bt->bm", X, bb)
    ln = xb / np.linalg.norm(xb, axis=1, keepdims=True)
    np.testing.assert_allclose(logits.detach().numpy(), ln @ Y, rtol=1e-10, atol=1e-12)


def test_attention_velocity_signs_at_zero():
    """Theorem 2 at Z = 0: distinct tokens rise, the common token falls."""
    cl = single_common(3, 4)
    dZ, xi = attention_velocity(cl, np.zeros((cl.M, cl.M)))
    m = cl.psi[0]
    assert np.all(xi > 0)
    assert np.all(dZ[m, cl.distinct.any(0)] > 0) and dZ[m, 0] < 0


def test_population_run_is_deterministic_and_zero_sum_rows():
    cl = single_common(2, 3)
    a = population_run(cl, 1.0, 0.05, 50)
    b = population_run(cl, 1.0, 0.05, 50)
    np.testing.assert_array_equal(a["Z"], b["Z"])
    np.testing.assert_allclose(a["Y"].sum(1), 0, atol=1e-13)  # (e_n - alpha) sums to zero (Lemma 1)


def test_transformer_side_by_side_runs_are_the_separate_runs():
    import torch

    from verify.models.scan_snap import train_transformer, train_transformer_side_by_side

    cl = syn_small(separate_queries=False)
    rates = [(1.0, 0.5), (10.0, 1.0), (0.5, 2.0)]
    g = torch.Generator().manual_seed(4)
    OneLayerTransformer(cl.M, generator=g)
    batches = [cl.sample(8, 16, g) for _ in range(5)]
    runs = train_transformer_side_by_side(cl, rates, steps=5, batches=batches,
                                          generator=torch.Generator().manual_seed(4))
    for (eY, eZ), b in zip(rates, runs):
        g = torch.Generator().manual_seed(4)
        a = train_transformer(OneLayerTransformer(cl.M, generator=g), cl, eta_Y=eY, eta_Z=eZ, steps=5, batch=8,
                              T=16, generator=g, record_every=5)
        np.testing.assert_array_equal(a["c"], b["c"])           # the same arithmetic, run by run
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-13)
    with pytest.raises(ValueError, match="^batches:"):
        train_transformer_side_by_side(cl, rates, steps=4, batches=batches)


@pytest.mark.parametrize("name, options", [("SGD", {"momentum": 0.0}), ("SGD", {"momentum": 0.9}),
                                           ("Adam", {"betas": (0.8, 0.99), "eps": 1e-6})])
def test_stacked_optimiser_is_torch_run_by_run(name, options):
    """StackedSGD / StackedAdam on runs stacked on a leading axis, one learning rate per run: torch's
    optimiser on each run's slice, to the bit, step after step."""
    import torch

    from verify.models import scan_snap

    stacked_cls = getattr(scan_snap, f"Stacked{name}")
    gen = torch.Generator().manual_seed(7)
    start = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64)
    grads = [torch.randn(3, 4, 5, generator=gen, dtype=torch.float64) for _ in range(6)]
    lrs = [0.1, 1.0, 7.0]
    leaves = [start[r].clone().requires_grad_(True) for r in range(3)]
    ref = getattr(torch.optim, name)([{"params": [p], "lr": lr} for p, lr in zip(leaves, lrs)], **options)
    stacked = start.clone().requires_grad_(True)
    opt = stacked_cls({"W": stacked}, {"W": lrs}, **options)
    for g in grads:
        for r, p in enumerate(leaves):
            p.grad = g[r].clone()
        ref.step()
        stacked.grad = g.clone()
        opt.step()
        assert torch.equal(stacked.detach(), torch.stack([p.detach() for p in leaves]))   # the same arithmetic
    assert not torch.equal(stacked.detach(), start)
    opt.zero_grad()
    assert stacked.grad is None
    with pytest.raises(ValueError, match="^lrs:"):
        stacked_cls({"W": stacked}, {"W": [0.1, 1.0]})


def test_plain_sgd_is_torch_sgd():
    import torch

    from verify.models.scan_snap import PlainSGD

    gen = torch.Generator().manual_seed(9)
    starts = [torch.randn(4, 5, generator=gen, dtype=torch.float64), torch.randn(7, generator=gen, dtype=torch.float64)]
    grads = [[torch.randn(s.shape, generator=gen, dtype=torch.float64) for s in starts] for _ in range(5)]
    for momentum in (0.0, 0.9):
        ref_p = [s.clone().requires_grad_(True) for s in starts]
        new_p = [s.clone().requires_grad_(True) for s in starts]
        ref, opt = torch.optim.SGD(ref_p, lr=0.7, momentum=momentum), PlainSGD(new_p, lr=0.7, momentum=momentum)
        for g in grads:
            for p, q, gi in zip(ref_p, new_p, g):
                p.grad, q.grad = gi.clone(), gi.clone()
            ref.step()
            opt.step()
            assert all(torch.equal(p.detach(), q.detach()) for p, q in zip(ref_p, new_p))   # the same arithmetic
        opt.zero_grad()
        assert all(q.grad is None for q in new_p)
        assert not torch.equal(new_p[0].detach(), starts[0])
