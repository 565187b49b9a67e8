"""Fast tests of the torch models of merged linear attention (verify.models.linear_attention)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from verify.models.linear_attention import (  # noqa: E402
    CubicFeatureMLP,
    MergedLinearAttention,
    cubic_features,
    sample_tokens,
    sgd_step,
    train_online_sgd,
)

LAM3 = np.array([[1.0, 0.3, 0.0], [0.3, 0.8, -0.2], [0.0, -0.2, 0.5]])


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def random_model(D=3, H=2, N=5, seed=1, vector_blocks=False):
    """Attention with every entry N(0, 1); the vector blocks zeroed unless asked."""
    g = gen(seed)
    m = MergedLinearAttention(D, H, N)
    with torch.no_grad():
        m.WV.copy_(torch.randn(m.WV.shape, generator=g, dtype=torch.float64))
        m.WKQ.copy_(torch.randn(m.WKQ.shape, generator=g, dtype=torch.float64))
    if not vector_blocks:
        m.set_vector_blocks_(np.zeros((H, D)), np.zeros((H, D)))
    return m


def numpy_attention(X, WV, WKQ, N):
    """ATTN_M(X) = X + sum_i (1/N) W^V_i X X^T W^KQ_i X, one sequence at a time."""
    out = np.empty_like(X)
    for b in range(X.shape[0]):
        Xb = X[b]
        out[b] = Xb + sum(WV[i] @ Xb @ Xb.T @ WKQ[i] @ Xb for i in range(WV.shape[0])) / N
    return out


# -- sampler --------------------------------------------------------------------------
def test_sample_tokens_shapes_and_labels():
    D, N, B = 3, 6, 10
    X, y_q, w = sample_tokens(LAM3, N, B, generator=gen())
    assert X.shape == (B, D + 1, N + 1) and y_q.shape == (B,) and w.shape == (B, D)
    assert X.dtype == torch.float64
    assert torch.all(X[:, D, N] == 0)                                  # query label slot
    assert torch.allclose(X[:, D, :N], torch.einsum("bdn,bd->bn", X[:, :D, :N], w))
    assert torch.allclose(y_q, torch.einsum("bd,bd->b", X[:, :D, N], w))


def test_sample_tokens_covariance():
    """Token second moment matches Lambda: z-scores of the 9 entries below 5."""
    X, _, _ = sample_tokens(LAM3, 4, 20000, generator=gen(3))
    x = X[:, :3, :].permute(0, 2, 1).reshape(-1, 3).numpy()
    prods = np.einsum("nd,ne->nde", x, x)
    z = (prods.mean(0) - LAM3) / (prods.std(0, ddof=1) / np.sqrt(len(x)))
    assert np.max(np.abs(z)) < 5


def test_sample_tokens_eigenvalue_list_and_errors():
    X, _, _ = sample_tokens([1.0, 0.5], 3, 2, generator=gen())
    assert X.shape == (2, 3, 4)
    with pytest.raises(ValueError, match="^Lambda"):
        sample_tokens([[1.0, 2.0], [0.0, 1.0]], 3, 2, generator=gen())
    with pytest.raises(ValueError, match="^N"):
        sample_tokens(LAM3, 0, 2, generator=gen())
    with pytest.raises(ValueError, match="^batch"):
        sample_tokens(LAM3, 3, 0, generator=gen())
    with pytest.raises(ValueError, match="^generator"):
        sample_tokens(LAM3, 3, 2, generator=np.random.default_rng(0))


# -- forward --------------------------------------------------------------------------
def test_forward_shape_and_full_matrix_vs_numpy():
    D, H, N = 3, 2, 5
    m = random_model(D, H, N, vector_blocks=True)
    X, _, _ = sample_tokens(LAM3, N, 7, generator=gen(2))
    with torch.no_grad():
        out = m(X)
    assert out.shape == X.shape
    ref = numpy_attention(X.numpy(), m.WV.detach().numpy(), m.WKQ.detach().numpy(), N)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    with torch.no_grad():
        np.testing.assert_allclose(m.predict(X).numpy(), out[:, D, N].numpy(), rtol=1e-12,
                                   atol=1e-13)


def test_softmax_layer_against_numpy():
    """The softmax variant: X + sum_i W^V_i X softmax_keys(X^T W^KQ_i X), no normaliser, one sequence at a
    time in numpy; predict is its query entry; rho cannot be combined with softmax."""
    D, H, N = 3, 2, 5
    g = gen(3)
    m = MergedLinearAttention(D, H, N, softmax=True)
    with torch.no_grad():
        m.WV.copy_(torch.randn(m.WV.shape, generator=g, dtype=torch.float64))
        m.WKQ.copy_(0.5 * torch.randn(m.WKQ.shape, generator=g, dtype=torch.float64))
    X, _, _ = sample_tokens(LAM3, N, 6, generator=gen(4))
    Xn, WV, WKQ = X.numpy(), m.WV.detach().numpy(), m.WKQ.detach().numpy()
    ref = np.empty_like(Xn)
    for b in range(Xn.shape[0]):
        Xb = Xn[b]
        total = Xb.copy()
        for i in range(H):
            S = Xb.T @ WKQ[i] @ Xb                                # [key, query]
            A = np.exp(S - S.max(axis=0)) / np.exp(S - S.max(axis=0)).sum(axis=0)
            total += WV[i] @ Xb @ A
        ref[b] = total
    with torch.no_grad():
        np.testing.assert_allclose(m(X).numpy(), ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
        np.testing.assert_allclose(m.predict(X).numpy(), ref[:, D, N], rtol=1e-12, atol=1e-13)
    with pytest.raises(ValueError, match="^rho: the softmax layer"):
        MergedLinearAttention(D, H, N, rho=6.0, softmax=True)
    with pytest.raises(ValueError, match="^softmax: expected True or False"):
        MergedLinearAttention(D, H, N, softmax="yes")


def test_prediction_is_beta_M_xq_and_mlp():
    """Eq. M and eq. 6 with zero vector blocks."""
    D, H, N = 3, 4, 5
    m = random_model(D, H, N)
    X, _, _ = sample_tokens(LAM3, N, 9, generator=gen(4))
    Xn = X.numpy()
    beta = np.einsum("bdn,bn->bd", Xn[:, :D, :N], Xn[:, D, :N]) / N
    M = m.effective_matrix().detach().numpy()
    v, U = m.value_scalars().detach().numpy(), m.kq_blocks().detach().numpy()
    np.testing.assert_allclose(M, np.einsum("h,hij->ij", v, U), rtol=1e-14)
    ref = np.einsum("bi,ij,bj->b", beta, M, Xn[:, :D, N])
    with torch.no_grad():
        np.testing.assert_allclose(m(X)[:, D, N].numpy(), ref, rtol=1e-11, atol=1e-12)
        mlp = CubicFeatureMLP(D, H).load_(v, U)
        np.testing.assert_allclose(mlp.predict(X).numpy(), ref, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(mlp.effective_matrix().numpy(), M, rtol=1e-14)
        wrong = CubicFeatureMLP(D, H, order="C").load_(v, U).predict(X).numpy()
    assert np.max(np.abs(wrong - ref)) > 1e-3 * np.max(np.abs(ref))


def test_cubic_features_column_major():
    D, N = 3, 4
    X, _, _ = sample_tokens(LAM3, N, 5, generator=gen(5))
    Xn = X.numpy()
    beta = np.einsum("bdn,bn->bd", Xn[:, :D, :N], Xn[:, D, :N]) / N
    z = cubic_features(X).numpy()
    for b in range(5):
        np.testing.assert_allclose(z[b], np.kron(Xn[b, :D, N], beta[b]), rtol=1e-14)
        np.testing.assert_allclose(z[b], np.outer(beta[b], Xn[b, :D, N]).reshape(-1, order="F"),
                                   rtol=1e-14)
    np.testing.assert_allclose(cubic_features(X, order="C").numpy()[0],
                               np.kron(beta[0], Xn[0, :D, N]), rtol=1e-14)
    with pytest.raises(ValueError, match="^order"):
        cubic_features(X, order="K")
    with pytest.raises(ValueError, match="^X"):
        cubic_features(X[0])


def test_rho_counts_context_tokens_only():
    D, H, N = 3, 2, 5
    m = random_model(D, H, N)
    m1 = MergedLinearAttention(D, H, N, rho=N + 1)
    with torch.no_grad():
        m1.WV.copy_(m.WV)
        m1.WKQ.copy_(m.WKQ)
        X, _, _ = sample_tokens(LAM3, N, 4, generator=gen(6))
        np.testing.assert_allclose(m1.predict(X).numpy() * (N + 1) / N, m.predict(X).numpy(),
                                   rtol=1e-12)


def test_star_blocks_get_no_gradient():
    D, H, N = 3, 2, 5
    m = random_model(D, H, N, vector_blocks=True)
    X, y_q, _ = sample_tokens(LAM3, N, 8, generator=gen(7))
    torch.mean((y_q - m.predict(X)) ** 2).backward()
    assert torch.all(m.WV.grad[:, :D, :] == 0)
    assert torch.all(m.WKQ.grad[:, :, D] == 0)
    assert torch.any(m.WV.grad[:, D, :D] != 0) and torch.any(m.WKQ.grad[:, D, :D] != 0)


# -- initialisation -------------------------------------------------------------------
def test_init_statistics_and_zero_blocks():
    D, H, w = 4, 4000, 0.3
    m = MergedLinearAttention(D, H, 5).init_(gen(8), w)
    assert torch.all(m.value_vectors() == 0) and torch.all(m.kq_vectors() == 0)
    assert m.zero_block_norms() == (0.0, 0.0)
    for sample, var in ((m.value_scalars(), w**2 / H), (m.kq_blocks(), w**2 / (H * D**2)),
                        (m.WV[:, :D, :], w**2 / (H * D**2)), (m.WKQ[:, :, D], w**2 / (H * D**2))):
        x = sample.detach().numpy().ravel()
        # sample variance of n Gaussians: relative SE sqrt(2 / n)
        assert abs(np.mean(x**2) / var - 1) < 5 * np.sqrt(2 / x.size)
        assert abs(np.mean(x)) < 5 * np.sqrt(var / x.size)
    # E||w2||^2 = E||W1||^2 = w_init^2 (eq. 35)
    assert abs(float((m.value_scalars().detach() ** 2).sum()) / w**2 - 1) < 5 * np.sqrt(2 / H)
    assert abs(float((m.kq_blocks().detach() ** 2).sum()) / w**2 - 1) < 5 * np.sqrt(2 / (H * D * D))


def test_init_and_load_deterministic():
    a = MergedLinearAttention(3, 2, 4).init_(gen(9), 0.1)
    b = MergedLinearAttention(3, 2, 4).init_(gen(9), 0.1)
    assert torch.equal(a.WV, b.WV) and torch.equal(a.WKQ, b.WKQ)
    c = MergedLinearAttention(3, 2, 4).init_(gen(10), 0.1)
    assert not torch.equal(a.WV, c.WV)
    v = np.array([0.5, -1.0])
    U = np.arange(18, dtype=float).reshape(2, 3, 3)
    a.load_(v, U)
    np.testing.assert_array_equal(a.value_scalars().detach().numpy(), v)
    np.testing.assert_array_equal(a.kq_blocks().detach().numpy(), U)
    assert a.zero_block_norms() == (0.0, 0.0)
    assert torch.equal(a.WV[:, :3, :], b.WV[:, :3, :])          # * blocks untouched
    mlp = CubicFeatureMLP(3, 2).load_(v, U)
    np.testing.assert_array_equal(mlp.W1.detach().numpy()[1], U[1].reshape(-1, order="F"))
    np.testing.assert_allclose(mlp.effective_matrix().detach().numpy(),
                               a.effective_matrix().detach().numpy(), rtol=1e-15)
    with pytest.raises(ValueError, match="^U"):
        a.load_(v, U[:, :2])
    with pytest.raises(ValueError, match="^v"):
        mlp.load_([1.0, np.nan], U)
    with pytest.raises(ValueError, match="^w_init"):
        a.init_(gen(), -1.0)
    with pytest.raises(ValueError, match="^H"):
        MergedLinearAttention(3, 0, 4)


# -- training -------------------------------------------------------------------------
def test_train_online_sgd_deterministic_and_time_mapping():
    import theory

    D, N, H = 3, 5, 2

    def run(model):
        return train_online_sgd(model, LAM3, N, eta=0.01, steps=6, batch=16, generator=gen(11),
                                log_every=2)

    a = run(MergedLinearAttention(D, H, N).init_(gen(12), 0.5))
    b = run(MergedLinearAttention(D, H, N).init_(gen(12), 0.5))
    np.testing.assert_array_equal(a.loss, b.loss)
    np.testing.assert_array_equal(a.M, b.M)
    np.testing.assert_array_equal(a.step, [0, 2, 4, 6])
    assert a.M_log.shape == (4, D, D) and np.array_equal(a.M_log[-1], a.M)
    np.testing.assert_allclose(a.t, 2 * 0.01 * a.step)
    L = theory.get("linear_attention.merged.loss")
    np.testing.assert_allclose(a.loss[-1], L(Lambda=LAM3, N=N, M=a.M), rtol=1e-12)
    assert a.zero_v.shape == a.step.shape and a.zero_v[0] == 0
    m = run(CubicFeatureMLP(D, H).load_([0.3, -0.2], np.ones((H, D, D)) * 0.1))
    assert m.zero_v is None and np.all(np.isfinite(m.loss))


@pytest.mark.parametrize("kind", ["merged", "separate", "mlp"])
def test_train_online_sgd_log_is_the_model_at_each_logged_step(kind, monkeypatch):
    """The batched log (parameters buffered, reduced in chunks) records what the model itself gives at
    each logged step: effective matrix, zero-block norms, flow weights; across chunk boundaries."""
    import verify.models.linear_attention as la
    from verify.models.linear_attention_separate import SeparateLinearAttention

    monkeypatch.setattr(la, "LOG_CHUNK", 3)
    monkeypatch.setattr(la, "WEIGHT_SNAPSHOTS", 2)
    D, N, H = 3, 5, 2
    make = {"merged": lambda: MergedLinearAttention(D, H, N).init_(gen(12), 0.5),
            "separate": lambda: SeparateLinearAttention(D, H, 2, N).init_(gen(12), 0.5),
            "mlp": lambda: CubicFeatureMLP(D, H).load_([0.3, -0.2], np.ones((H, D, D)) * 0.1)}[kind]
    model = make()
    run = train_online_sgd(model, LAM3, N, eta=0.01, steps=7, batch=16, generator=gen(11), log_every=1)
    np.testing.assert_array_equal(run.step, np.arange(8))
    assert np.isnan(run.batch_loss[0]) and np.all(np.isfinite(run.batch_loss[1:]))
    # the same steps one at a time, each model state evaluated directly
    model, g = make(), gen(11)
    for k in range(8):
        if k:
            train_online_sgd(model, LAM3, N, eta=0.01, steps=1, batch=16, generator=g)
        with torch.no_grad():
            np.testing.assert_allclose(run.M_log[k], model.effective_matrix().numpy(), rtol=1e-13, atol=1e-15)
            if kind != "mlp":
                np.testing.assert_allclose([run.zero_v[k], run.zero_u[k]], model.zero_block_norms(), rtol=1e-13)
        if kind == "separate" and k in run.weights:
            for a, b in zip(run.weights[k], model.flow_weights()):
                np.testing.assert_array_equal(a, b)
    assert (kind == "separate") == (run.weights is not None)
    if kind == "separate":
        assert sorted(run.weights) == [0, 3, 6]   # every (7 // 2)-th logged step
    else:
        assert run.zero_v is None if kind == "mlp" else run.zero_v.shape == (8,)


def test_predict_with_a_precomputed_gram():
    m = random_model()
    X, _, _ = sample_tokens(LAM3, 5, 32, generator=gen(3))
    with torch.no_grad():
        np.testing.assert_array_equal(m.predict(X, gram=X @ X.transpose(1, 2)).numpy(), m.predict(X).numpy())
    with pytest.raises(ValueError, match="gram"):
        m.predict(X, gram=X[:, :, :3])
    with pytest.raises(ValueError, match="gram"):
        MergedLinearAttention(3, 2, 5, softmax=True).predict(X, gram=X @ X.transpose(1, 2))


def test_train_online_sgd_side_by_side_is_each_run_alone():
    # a list of models is trained on one stream of batches: each run is what that model trained alone
    # from a generator in the same state gives, bit for bit
    from verify.models.linear_attention_separate import SeparateLinearAttention

    D, N = 3, 5

    def models():
        return [MergedLinearAttention(D, 2, N).init_(gen(12), 0.5),
                SeparateLinearAttention(D, 2, 1, N).init_(gen(13), 0.5)]

    for next_token in (False, True):
        together = train_online_sgd(models(), LAM3, N, eta=0.01, steps=5, batch=16, generator=gen(11),
                                    next_token=next_token)
        assert isinstance(together, list) and len(together) == 2
        for model, run in zip(models(), together):
            alone = train_online_sgd(model, LAM3, N, eta=0.01, steps=5, batch=16, generator=gen(11),
                                     next_token=next_token)
            np.testing.assert_array_equal(run.M_log, alone.M_log)
            np.testing.assert_array_equal(run.batch_loss[1:], alone.batch_loss[1:])
    with pytest.raises(ValueError, match="^model"):
        train_online_sgd([MergedLinearAttention(D, 2, N), MergedLinearAttention(D, 2, N, dtype=torch.float32)],
                         LAM3, N, eta=0.01, steps=1, batch=4, generator=gen(1))
    with pytest.raises(ValueError, match="^model"):
        train_online_sgd([], LAM3, N, eta=0.01, steps=1, batch=4, generator=gen(1))


def test_train_online_sgd_side_by_side_fixed_portions_are_each_run_alone():
    # one fixed-task portion per model (App. G): each run is that model trained alone with its portion from a
    # generator in the same state, bit for bit; equal portions share a batch
    D, N, w_star = 3, 5, [1.0, -0.5, 0.25]
    portions = [0.0, 0.25, 0.5, 0.25]

    def models():
        return [MergedLinearAttention(D, 2, N).init_(gen(12), 0.5) for _ in portions]

    together = train_online_sgd(models(), LAM3, N, eta=0.01, steps=5, batch=16, generator=gen(11),
                                w_star=w_star, fixed=portions)
    for model, p, run in zip(models(), portions, together):
        alone = train_online_sgd(model, LAM3, N, eta=0.01, steps=5, batch=16, generator=gen(11), w_star=w_star,
                                 fixed=p)
        np.testing.assert_array_equal(run.M_log, alone.M_log)
        np.testing.assert_array_equal(run.batch_loss[1:], alone.batch_loss[1:])
    with pytest.raises(ValueError, match="^fixed"):
        train_online_sgd(models()[:2], LAM3, N, eta=0.01, steps=1, batch=16, generator=gen(1), w_star=w_star,
                         fixed=portions)
    with pytest.raises(ValueError, match="^fixed"):
        train_online_sgd(models()[0], LAM3, N, eta=0.01, steps=1, batch=16, generator=gen(1), w_star=w_star,
                         fixed=[0.5])
    with pytest.raises(ValueError, match="^w_star"):
        train_online_sgd(models()[:2], LAM3, N, eta=0.01, steps=1, batch=16, generator=gen(1), fixed=[0.0, 0.5])


def test_sgd_step_is_torch_sgd_bit_for_bit():
    # the training loop's update is torch.optim.SGD's, to the last bit, in both precisions; a tensor
    # without a gradient is left alone
    for dtype in (torch.float64, torch.float32):
        runs = []
        for fused in (False, True):
            m = MergedLinearAttention(3, 2, 5, dtype=dtype).init_(gen(12), 0.5)
            params = list(m.parameters())
            opt = torch.optim.SGD(params, lr=0.37)
            g = gen(3)
            for _ in range(4):
                X, y_q, _ = sample_tokens(LAM3, 5, 16, generator=g, dtype=dtype)
                for p in params:
                    p.grad = None
                torch.mean((y_q - m.predict(X)) ** 2).backward()
                sgd_step(params, 0.37) if fused else opt.step()
            runs.append([p.detach().clone() for p in params])
        assert all(torch.equal(a, b) for a, b in zip(*runs))
    t = torch.ones(3, requires_grad=True)
    sgd_step([t], 1.0)
    assert torch.equal(t.detach(), torch.ones(3))


def _layers(dtype, softmax):
    from verify.models.linear_attention_separate import SeparateLinearAttention

    out = [MergedLinearAttention(3, 2, 5, softmax=softmax, dtype=dtype),
           MergedLinearAttention(4, 3, 15, softmax=softmax, dtype=dtype),
           SeparateLinearAttention(3, 2, 1, 5, softmax=softmax, dtype=dtype),
           SeparateLinearAttention(4, 3, 2, 15, softmax=softmax, dtype=dtype)]
    if not softmax:
        out += [MergedLinearAttention(3, 2, 5, rho=6.0, dtype=dtype),
                SeparateLinearAttention(3, 2, 2, 5, rho=6.0, dtype=dtype),
                CubicFeatureMLP(3, 2, dtype=dtype), CubicFeatureMLP(3, 2, order="C", dtype=dtype)]
    return out


@pytest.mark.parametrize("softmax", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_mse_gradients_are_autograds(softmax, dtype):
    # the closed-form loss gradients of the training loop against autograd's on predict(), every block
    # random (vector blocks included), linear (rho = N and N + 1) and softmax, merged and separate
    g = gen(5)
    for m in _layers(dtype, softmax):
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=dtype))
        lam = np.eye(m.D) + 0.1
        X, y_q, _ = sample_tokens(lam, getattr(m, "N", 5), 64, generator=g, dtype=dtype)
        params = list(m.parameters())
        loss = torch.mean((y_q - m.predict(X)) ** 2)
        auto = torch.autograd.grad(loss, params)
        value, views, grads = m.mse_gradients(X, y_q)
        assert value.item() == pytest.approx(loss.item(), rel=1e-12 if dtype == torch.float64 else 1e-6)
        # every update lands where autograd's gradient is: apply both to zeroed copies
        _assert_update_is_autograds(params, views, grads, auto, dtype)


def _assert_update_is_autograds(params, views, grads, auto, dtype):
    """Adding ``grads`` to ``views`` (a closed-form gradient's update) on zeroed copies of ``params``
    gives autograd's gradients ``auto`` (relative to their largest entry); ``params`` are left as they were."""
    with torch.no_grad():
        saved = [p.detach().clone() for p in params]
        for p in params:
            p.zero_()
        torch._foreach_add_(views, grads)
        closed = [p.detach().clone() for p in params]
        for p, s in zip(params, saved):
            p.copy_(s)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for a, c in zip(auto, closed):
        scale = float(a.abs().max())
        assert scale > 0
        np.testing.assert_allclose(c.numpy(), a.numpy(), rtol=0, atol=tol * scale)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_next_token_gradients_are_autograds(dtype):
    # the closed-form next-token loss gradient (eq. 23) against autograd's on next_token_predictions(), every
    # block random, merged and separate linear layers; the softmax layers have none
    from verify.models.linear_attention import next_token_predictions

    g = gen(6)
    for m in _layers(dtype, False):
        if isinstance(m, CubicFeatureMLP):
            continue
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=dtype))
        X, y_q, _ = sample_tokens(np.eye(m.D) + 0.1, m.N, 64, generator=g, dtype=dtype)
        X[:, -1, -1] = y_q                                   # every label, the query's included
        params = list(m.parameters())
        loss = torch.mean((X[:, -1, 1:] - next_token_predictions(m, X)) ** 2)
        auto = torch.autograd.grad(loss, params)
        value, views, grads = m.next_token_gradients(X)
        assert value.item() == pytest.approx(loss.item(), rel=1e-12 if dtype == torch.float64 else 1e-6)
        _assert_update_is_autograds(params, views, grads, auto, dtype)
    for m in _layers(dtype, True)[::2]:
        with pytest.raises(ValueError, match="^softmax"):
            m.next_token_gradients(X[:, :m.D + 1, :m.N + 1])


def test_train_online_sgd_is_autograd_and_torch_sgd():
    # the loop (closed-form gradients, fused update) against a plain autograd + torch.optim.SGD loop
    from verify.models.linear_attention import _draw_tokens

    for m in _layers(torch.float64, False) + _layers(torch.float64, True):
        if isinstance(m, CubicFeatureMLP):
            m.load_(0.5 * torch.randn(m.H, generator=gen(12)), 0.5 * torch.randn(m.H, m.D, m.D, generator=gen(13)))
            ref = CubicFeatureMLP(m.D, m.H, order=m.order)
        else:
            m.init_(gen(12), 0.5)
            ref = type(m)(*((m.D, m.H, m.R, m.N) if hasattr(m, "R") else (m.D, m.H, m.N)), softmax=m.softmax,
                          **({} if m.softmax else {"rho": m.rho}))
        ref.load_state_dict(m.state_dict())
        lam, N = np.eye(m.D) + 0.1, getattr(m, "N", 5)
        run = train_online_sgd(m, lam, N, eta=0.05, steps=5, batch=16, generator=gen(11))
        opt = torch.optim.SGD(ref.parameters(), lr=0.05)
        g = gen(11)
        chol = torch.as_tensor(np.linalg.cholesky(lam), dtype=torch.float64)
        losses = []
        for _ in range(5):
            X, y_q, _ = _draw_tokens(N, 16, g, torch.device("cpu"), torch.float64, chol, None, 0)
            opt.zero_grad(set_to_none=True)
            loss = torch.mean((y_q - ref.predict(X)) ** 2)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        np.testing.assert_allclose(run.batch_loss[1:], losses, rtol=1e-12)
        for a, b in zip(m.parameters(), ref.parameters()):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=0, atol=1e-13)


def test_train_online_sgd_validation():
    m = MergedLinearAttention(3, 2, 5)
    kw = dict(eta=0.01, steps=1, batch=4, generator=gen())
    with pytest.raises(ValueError, match="^eta"):
        train_online_sgd(m, LAM3, 5, **{**kw, "eta": 0.0})
    with pytest.raises(ValueError, match="^N"):
        train_online_sgd(m, LAM3, 6, **kw)
    with pytest.raises(ValueError, match="^Lambda"):
        train_online_sgd(m, [1.0, 1.0], 5, **kw)
    with pytest.raises(ValueError, match="^steps"):
        train_online_sgd(m, LAM3, 5, **{**kw, "steps": -1})
    with pytest.raises(ValueError, match="^fixed"):
        train_online_sgd(m, LAM3, 5, **{**kw, "fixed": 1.5}, w_star=np.ones(3))
    with pytest.raises(ValueError, match="^w_star"):
        train_online_sgd(m, LAM3, 5, **{**kw, "fixed": 0.5})


def test_sample_tokens_fixed_task_portion():
    # App. G: the first round(p B) sequences carry w*, the rest the draws they would have had anyway
    w_star = np.array([0.5, -1.0, 2.0])
    plain = sample_tokens(LAM3, 6, 10, generator=gen(3))
    mixed = sample_tokens(LAM3, 6, 10, generator=gen(3), w_star=w_star, fixed=0.3)
    assert torch.equal(plain.X[:, :3], mixed.X[:, :3])                     # the same inputs
    assert torch.equal(plain.w[3:], mixed.w[3:])
    np.testing.assert_array_equal(mixed.w[:3].numpy(), np.tile(w_star, (3, 1)))
    y = torch.einsum("bd,bdn->bn", mixed.w, mixed.X[:, :3])
    torch.testing.assert_close(mixed.X[:, 3, :6], y[:, :6])
    torch.testing.assert_close(mixed.y_q, y[:, 6])
    with pytest.raises(ValueError, match="^w_star"):
        sample_tokens(LAM3, 6, 10, generator=gen(), fixed=0.5)
    with pytest.raises(ValueError, match="^w_star"):
        sample_tokens(LAM3, 6, 10, generator=gen(), w_star=np.ones(2), fixed=0.5)
    with pytest.raises(ValueError, match="^fixed"):
        sample_tokens(LAM3, 6, 10, generator=gen(), w_star=w_star, fixed=-0.1)


def _randomised(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


@pytest.mark.parametrize("kind", ["merged", "separate"])
def test_next_token_predictions_are_the_layer_on_every_prefix(kind):
    from verify.models.linear_attention import next_token_predictions
    from verify.models.linear_attention_separate import SeparateLinearAttention

    D, N = 3, 6
    model = _randomised(MergedLinearAttention(D, 2, N) if kind == "merged" else SeparateLinearAttention(D, 2, 2, N))
    g = torch.Generator().manual_seed(1)
    X, y_q, _ = sample_tokens(np.ones(D), N, 5, generator=g)
    X = X.clone()
    X[:, D, N] = y_q                                   # every token labelled
    pred = next_token_predictions(model, X).detach()
    assert pred.shape == (5, N)
    for p in range(1, N + 1):                          # the layer on tokens 1..p+1, query label 0, rho = p
        Xp = X[:, :, :p + 1].clone()
        Xp[:, D, p] = 0.0
        model.rho = float(p)
        ref = model.predict(Xp).detach()
        np.testing.assert_allclose(pred[:, p - 1].numpy(), ref.numpy(), rtol=1e-12, atol=1e-12 * float(ref.abs().max()))
    # rho = N at every position (the fixed-length normaliser) is a different function
    model.rho = float(N)
    X1 = X[:, :, :2].clone()
    X1[:, D, 1] = 0.0
    assert float((pred[:, 0] - model.predict(X1).detach()).abs().max()) > 1e-3


def test_next_token_population_loss_averages_lengths():
    from verify.models.linear_attention import next_token_population_loss
    from verify.stats import evaluate

    Lam = np.diag([0.5, 0.3, 0.2])
    M = np.random.default_rng(0).standard_normal((3, 3)) * 0.3
    direct = np.mean([float(evaluate("linear_attention.merged.loss", Lambda=Lam, N=p, M=M)) for p in range(1, 9)])
    assert float(next_token_population_loss(Lam, 8, M)) == pytest.approx(direct, rel=1e-12)
    # at the eq.-25 minimiser it is eq. 26 (m = D)
    M_ntp = evaluate("linear_attention.ntp.converged_matrix", Lambda=Lam, N_max=8)
    L_ntp = float(evaluate("linear_attention.ntp.global_min_loss", Lambda=Lam, N_max=8))
    assert float(next_token_population_loss(Lam, 8, M_ntp)) == pytest.approx(L_ntp, rel=1e-10)


def test_softmax_layers_have_no_value_query_tensor():
    from verify.models.linear_attention_separate import SeparateLinearAttention

    for model in (MergedLinearAttention(2, 1, 3, softmax=True), SeparateLinearAttention(2, 1, 1, 3, softmax=True)):
        with pytest.raises(ValueError, match="^softmax"):
            model.value_query_tensor()
