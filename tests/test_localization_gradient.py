"""Eigenspectrum statistics, bounds, LOCATER and eq. 3 of Bao, Hataya, Karakida 2024 (fast).

Gradients are compared with torch autograd; bounds with random draws (hypothesis); the model
with its shapes, its input validation and its determinism.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from verify.models.localization import (SelfAttentionLM, clipped_linear_loss, eigenspectrum,
                                        linearised_coefficients, locater_penalty, qk_gradient,
                                        qk_gradient_expansion)

spectra = st.lists(st.floats(-3, 3, allow_nan=False), min_size=2, max_size=12)


def _cf(id):
    return theory.get(f"localization.{id}")


@settings(max_examples=60, deadline=None)
@given(spectra)
def test_variance_and_trace_bound_on_spectra(w):
    w = np.array(w)
    d, trW, trW2 = len(w), w.sum(), (w**2).sum()
    if trW2 < 1e-6:
        return
    var = _cf("eigen.variance")(d=d, trW=min(trW, np.sqrt(d * trW2)), trW2=trW2)
    assert var >= -1e-9 * d * trW2
    assert var == pytest.approx(d**2 * np.var(w), abs=1e-9 * d * trW2)
    assert abs(trW) <= _cf("eigen.trace_bound")(d=d, trW2=trW2) * (1 + 1e-12)


def test_variance_rejects_traces_without_a_real_spectrum():
    with pytest.raises(ValueError, match=r"^trW: "):
        _cf("eigen.variance")(d=2, trW=3.0, trW2=1.0)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 8), st.integers(0, 10**6))
def test_norm_bounds_random(d, seed):
    rng = np.random.default_rng(seed)
    R = rng.uniform(-2.5, 2.5, (d, d))
    Sigma = R.T @ R / d + 1e-2 * np.eye(d)
    G = rng.standard_normal((d, d))
    W = 0.5 * (G + G.T) + rng.normal() * np.eye(d)
    ev = np.linalg.eigvalsh(Sigma)
    trW, trW2 = np.trace(W @ Sigma), np.trace(W @ Sigma @ W @ Sigma)
    assert _cf("bounds.spectral_lower")(trW=trW, d=d, sigma_max=ev[-1]) <= np.linalg.norm(W, 2) * (1 + 1e-12)
    assert _cf("bounds.frobenius_lower")(trW=trW, d=d, sigma_max=ev[-1]) <= np.linalg.norm(W) * (1 + 1e-12)
    assert np.linalg.norm(W) <= _cf("bounds.frobenius_upper")(trW2=trW2, sigma_min=ev[0]) * (1 + 1e-12)
    assert _cf("eigen.scale")(Sigma=Sigma, W_QK=W) == pytest.approx(trW2, rel=1e-10)


def test_eq7_counterexample_identity():
    d = 16
    printed = _cf("bounds.spectral_lower")(printed=True, trW=d, d=d, sigma_max=1.0)
    assert printed == pytest.approx(4.0)            # sqrt(d) > ||I||_2 = 1
    assert _cf("bounds.spectral_lower")(trW=d, d=d, sigma_max=1.0) == pytest.approx(1.0)


def test_eq9_printed_exceeds_log_T_and_corrected_decreases():
    cf = _cf("entropy.zhai_bound")
    assert cf(printed=True, T=64, nu=4.0) == pytest.approx(16.725, abs=1e-3)
    nu = np.linspace(0.01, 30, 500)
    vals = cf(T=64, nu=nu)
    assert np.all(np.diff(vals) < 0) and np.all(vals <= np.log(65))
    assert abs(cf(T=64, nu=4.0) - _cf("entropy.zhai_theorem")(T=64, nu=4.0)) < 0.06


def test_locater_gradients_vs_autograd():
    rng = np.random.default_rng(3)
    Wq, Wk = rng.standard_normal((2, 4, 4)) / 2
    kw = dict(W_Q=Wq, W_K=Wk, kappa1=0.7, kappa2=1.9)
    tq, tk = torch.tensor(Wq, requires_grad=True), torch.tensor(Wk, requires_grad=True)
    val = locater_penalty(tq, tk, 0.7, 1.9)
    gq, gk = torch.autograd.grad(val, (tq, tk))
    assert _cf("locater.regulariser")(**kw) == pytest.approx(val.item(), rel=1e-13)
    np.testing.assert_allclose(_cf("locater.grad_query")(**kw), gq.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(_cf("locater.grad_key")(**kw), gk.numpy(), rtol=1e-12, atol=1e-13)
    assert np.linalg.norm(_cf("locater.grad_query")(printed=True, **kw) - gq.numpy()) > 1e-3


def _instance(seed=0, B=12, d=4, T=6):
    rng = np.random.default_rng(seed)
    walk = np.cumsum(rng.standard_normal((B, d, T + 1)), axis=2)
    W_QK = rng.standard_normal((d, d)) * 0.7
    W_V = rng.standard_normal((d, d)) / 2
    W_F = np.eye(d) + rng.standard_normal((d, d)) / 4
    return walk[:, :, :T], walk[:, :, T], W_QK, W_V, W_F, np.sqrt(d)


def test_eq3_corrected_matches_autograd_printed_does_not():
    X, y, W_QK, W_V, W_F, lam = _instance()
    u, _, _ = linearised_coefficients(np.einsum("bdt,de,be->bt", X, W_QK, X[:, :, -1]) / lam)
    keep = (np.min(np.minimum(abs(u), abs(u - 1)), axis=1) > 1e-3) & ((u >= 0) & (u <= 1)).any(axis=1)
    assert keep.sum() >= 3
    X, y = X[keep], y[keep]
    Wt = torch.tensor(W_QK, requires_grad=True)
    loss = clipped_linear_loss(torch.tensor(X), torch.tensor(y), Wt, torch.tensor(W_V), torch.tensor(W_F), lam)
    np.testing.assert_allclose(loss.detach().numpy(), clipped_linear_loss(X, y, W_QK, W_V, W_F, lam), rtol=1e-12)
    auto = np.stack([torch.autograd.grad(loss[b], Wt, retain_graph=True)[0].numpy() for b in range(len(X))])
    corrected = qk_gradient(X, y, W_QK, W_V, W_F, lam)
    np.testing.assert_allclose(corrected, auto, rtol=1e-9, atol=1e-9 * np.abs(auto).max())
    printed = qk_gradient(X, y, W_QK, W_V, W_F, lam, form="printed")
    assert np.linalg.norm(printed - auto) > 0.1 * np.linalg.norm(auto)
    for s, t in zip(qk_gradient_expansion(X, y, W_QK, W_V, W_F, lam),
                    qk_gradient(X, y, W_QK, W_V, W_F, lam, terms=True)):
        np.testing.assert_allclose(s, t, rtol=1e-10, atol=1e-10 * np.abs(t).max())


@pytest.mark.parametrize("kw, name", [
    (dict(temperature=0.0), "temperature"),
    (dict(form="paper"), "form"),
    (dict(y=np.zeros((3, 4))), "y"),
    (dict(W_V=np.eye(3)), "W_V"),
    (dict(X=np.zeros((4, 6))), "X"),
])
def test_eq3_bad_input_names_the_parameter(kw, name):
    X, y, W_QK, W_V, W_F, lam = _instance()
    args = dict(X=X, y=y, W_QK=W_QK, W_V=W_V, W_F=W_F, temperature=lam)
    args.update(kw)
    with pytest.raises(ValueError, match=rf"^{name}: "):
        qk_gradient(**args)


def test_eigenspectrum_of_scaled_identity():
    out = eigenspectrum(np.eye(5) / 5)
    assert out["trace"] == pytest.approx(1.0) and out["variance"] == pytest.approx(0.0, abs=1e-14)
    with pytest.raises(ValueError, match=r"^W_QK: "):
        eigenspectrum(np.ones((2, 3)))


@pytest.mark.parametrize("layers", [1, 3])
def test_model_shapes(layers):
    g = torch.Generator().manual_seed(0)
    model = SelfAttentionLM(5, layers, generator=g)
    X = torch.randn(7, 5, 6, generator=g, dtype=torch.float64)
    out, attns, inputs = model(X, return_all=True)
    assert out.shape == (7, 5) and len(attns) == layers and attns[0].shape == (7, 6, 6)
    assert torch.allclose(attns[0].sum(-1), torch.ones(7, 6, dtype=torch.float64))
    assert torch.all(attns[0].triu(1) == 0)               # causal
    with pytest.raises(ValueError, match=r"^X: "):
        model(torch.zeros(2, 4, 6, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"^layers: "):
        SelfAttentionLM(5, 0)
    with pytest.raises(ValueError, match=r"^kappa1: "):
        model.locater(-1.0, 1.0)
