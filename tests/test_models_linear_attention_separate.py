"""Fast tests of the torch model of separate key/query attention
(verify.models.linear_attention_separate)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from verify.flows.separate import effective_matrix as flow_effective_matrix  # noqa: E402 (after the torch skip)
from verify.flows.separate import init_separate  # noqa: E402 (after the torch skip)
from verify.models.linear_attention import sample_tokens  # noqa: E402 (after the torch skip)
from verify.models.linear_attention_separate import SeparateLinearAttention  # noqa: E402 (after the torch skip)

LAM3 = np.array([[1.0, 0.3, 0.0], [0.3, 0.8, -0.2], [0.0, -0.2, 0.5]])


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def random_model(D=3, H=2, R=2, N=5, seed=1, zero_blocks=True, softmax=False):
    """Every entry N(0, 1); the vector v_i and scalars k_ir zeroed unless asked."""
    g = gen(seed)
    m = SeparateLinearAttention(D, H, R, N, softmax=softmax)
    with torch.no_grad():
        for p in (m.WV, m.WK, m.WQ):
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    if zero_blocks:
        m.set_zero_blocks_(np.zeros((H, D)), np.zeros((H, R)))
    return m


def numpy_attention(X, WV, WK, WQ, N, softmax=False):
    """X + sum_i W^V_i X A_i with A_i = X^T W^K_i^T W^Q_i X / N or its softmax over keys."""
    out = np.empty_like(X)
    for b in range(X.shape[0]):
        Xb = X[b]
        acc = Xb.copy()
        for i in range(WV.shape[0]):
            S = Xb.T @ WK[i].T @ WQ[i] @ Xb
            if softmax:
                E = np.exp(S - S.max(axis=0, keepdims=True))
                A = E / E.sum(axis=0, keepdims=True)
            else:
                A = S / N
            acc = acc + WV[i] @ Xb @ A
        out[b] = acc
    return out


def params(m):
    return [p.detach().numpy() for p in (m.WV, m.WK, m.WQ)]


# -- forward --------------------------------------------------------------------------
@pytest.mark.parametrize("softmax", [False, True])
def test_forward_shape_and_full_matrix_vs_numpy(softmax):
    D, H, R, N = 3, 2, 2, 5
    m = random_model(D, H, R, N, zero_blocks=False, softmax=softmax)
    X, _, _ = sample_tokens(LAM3, N, 4, generator=gen(2))
    with torch.no_grad():
        out = m(X)
        pred = m.predict(X)
    assert out.shape == X.shape and pred.shape == (4,)
    ref = numpy_attention(X.numpy(), *params(m), N, softmax=softmax)
    assert np.allclose(out.numpy(), ref, rtol=1e-12, atol=1e-12)
    assert np.allclose(pred.numpy(), ref[:, D, N], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("softmax", [False, True])
def test_predict_gradients_equal_the_full_forward(softmax):
    # predict contracts in another order (the token Gram matrix first for the linear layer):
    # the same function of every weight entry, so the same gradients
    D, H, R, N = 3, 2, 2, 5
    X, y, _ = sample_tokens(LAM3, N, 6, generator=gen(4))
    grads = []
    for use_predict in (True, False):
        m = random_model(D, H, R, N, zero_blocks=False, softmax=softmax)
        yhat = m.predict(X) if use_predict else m(X)[:, D, N]
        torch.mean((y - yhat) ** 2).backward()
        grads.append(torch.cat([p.grad.ravel() for p in (m.WV, m.WK, m.WQ)]).numpy())
    scale = np.abs(grads[1]).max()
    assert scale > 0
    np.testing.assert_allclose(grads[0], grads[1], rtol=0, atol=1e-12 * scale)


def test_forward_equals_beta_M_xq_with_zero_blocks():
    D, H, R, N = 3, 3, 2, 6
    m = random_model(D, H, R, N)
    X, _, _ = sample_tokens(LAM3, N, 50, generator=gen(3))
    Xn = X.numpy()
    beta = np.einsum("bdn,bn->bd", Xn[:, :D, :N], Xn[:, D, :N]) / N
    M = m.effective_matrix().detach().numpy()
    v, k, q = (a.detach().numpy() for a in (m.value_scalars(), m.keys(), m.queries()))
    assert np.allclose(M, np.einsum("i,ird,ire->de", v, k, q), rtol=1e-14, atol=0)
    ref = np.einsum("bi,ij,bj->b", beta, M, Xn[:, :D, N])
    with torch.no_grad():
        assert np.allclose(m(X)[:, D, N].numpy(), ref, rtol=1e-12, atol=1e-12)
        assert np.allclose(m.predict(X).numpy(), ref, rtol=1e-12, atol=1e-12)
    # the * blocks do not reach the prediction
    with torch.no_grad():
        before = m.predict(X).clone()
        m.WV[:, :D, :] += 1.0
        m.WQ[:, :, D] -= 2.0
        assert torch.allclose(m.predict(X), before, rtol=1e-12, atol=1e-12)


def test_rho_changes_the_scale():
    D, H, R, N = 3, 2, 1, 5
    m = random_model(D, H, R, N)
    m2 = SeparateLinearAttention(D, H, R, N, rho=N + 1)
    with torch.no_grad():
        for a, b in zip((m2.WV, m2.WK, m2.WQ), (m.WV, m.WK, m.WQ)):
            a.copy_(b)
    X, _, _ = sample_tokens(LAM3, N, 5, generator=gen(4))
    with torch.no_grad():
        assert torch.allclose(m2.predict(X) * (N + 1), m.predict(X) * N, rtol=1e-12)


# -- init / load ----------------------------------------------------------------------
def test_init_statistics_and_zero_blocks():
    D, H, R, N, w = 4, 200, 3, 5, 0.3
    m = SeparateLinearAttention(D, H, R, N).init_(gen(5), w)
    assert torch.all(m.value_vectors() == 0) and torch.all(m.key_scalars() == 0)
    assert m.zero_block_norms() == (0.0, 0.0)
    v = m.value_scalars().detach().numpy()
    k = m.keys().detach().numpy().ravel()
    q = m.queries().detach().numpy().ravel()
    # variance estimates vs eq. 36; relative SE sqrt(2/n): z below 5
    for x, var in ((v, w**2 / H), (k, w**2 / (H * R * D)), (q, w**2 / (H * R * D))):
        z = (np.mean(x**2) / var - 1.0) / np.sqrt(2.0 / x.size)
        assert abs(z) < 5
    assert float(m.WV.detach()[:, :D, :].abs().sum()) > 0 and float(m.WQ.detach()[:, :, D].abs().sum()) > 0


def test_init_deterministic_and_load_matches_flow():
    D, H, R, N = 3, 4, 2, 7
    a = SeparateLinearAttention(D, H, R, N).init_(gen(6), 0.1)
    b = SeparateLinearAttention(D, H, R, N).init_(gen(6), 0.1)
    for p, r in zip((a.WV, a.WK, a.WQ), (b.WV, b.WK, b.WQ)):
        assert torch.equal(p, r)
    v, k, q = init_separate(np.random.default_rng(0), H, R, D, 0.1)
    a.set_zero_blocks_(np.ones((H, D)), np.ones((H, R)))
    a.load_(v, k, q)
    assert torch.all(a.value_vectors() == 0) and torch.all(a.key_scalars() == 0)
    assert np.array_equal(a.value_scalars().detach().numpy(), v)
    assert np.array_equal(a.keys().detach().numpy(), k)
    assert np.array_equal(a.queries().detach().numpy(), q)
    assert np.allclose(a.effective_matrix().detach().numpy(), flow_effective_matrix(v, k, q),
                       rtol=1e-14, atol=1e-17)


# -- bad input ------------------------------------------------------------------------
def test_bad_input():
    with pytest.raises(ValueError, match="^D"):
        SeparateLinearAttention(0, 2, 1, 5)
    with pytest.raises(ValueError, match="^H"):
        SeparateLinearAttention(3, 1.5, 1, 5)
    with pytest.raises(ValueError, match="^R"):
        SeparateLinearAttention(3, 2, 0, 5)
    with pytest.raises(ValueError, match="^N"):
        SeparateLinearAttention(3, 2, 1, True)
    with pytest.raises(ValueError, match="^softmax"):
        SeparateLinearAttention(3, 2, 1, 5, softmax="yes")
    with pytest.raises(ValueError, match="^rho"):
        SeparateLinearAttention(3, 2, 1, 5, rho=-1.0)
    with pytest.raises(ValueError, match="^rho"):
        SeparateLinearAttention(3, 2, 1, 5, softmax=True, rho=2.0)
    m = SeparateLinearAttention(3, 2, 1, 5)
    with pytest.raises(ValueError, match="^X"):
        m.predict(torch.zeros(2, 3, 6, dtype=torch.float64))
    with pytest.raises(ValueError, match="^X"):
        m(np.zeros((2, 4, 6)))
    with pytest.raises(ValueError, match="^generator"):
        m.init_(np.random.default_rng(0), 0.1)
    with pytest.raises(ValueError, match="^w_init"):
        m.init_(gen(), -0.1)
    with pytest.raises(ValueError, match="^v"):
        m.load_(np.zeros(3), np.zeros((2, 1, 3)), np.zeros((2, 1, 3)))
    with pytest.raises(ValueError, match="^k"):
        m.load_(np.zeros(2), np.zeros((2, 2, 3)), np.zeros((2, 1, 3)))
    with pytest.raises(ValueError, match="^q"):
        m.load_(np.zeros(2), np.zeros((2, 1, 3)), np.full((2, 1, 3), np.nan))
