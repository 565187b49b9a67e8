"""The L-layer linear transformer of Ahn et al. 2023 (numpy and torch)."""

import numpy as np
import pytest

from verify.models import linear_transformer as lt
from verify.tasks.preconditioned_gd import distorted_covariance, sample_prompts


def _prompts(seed=0, n=7, batch=13, d=5):
    rng = np.random.default_rng(seed)
    Sigma = distorted_covariance(rng) if d == 5 else np.eye(d)
    return rng, sample_prompts(rng, Sigma, n, batch, task="inverse")


def _naive(Z0, P, Q, relu=False):
    """Per-prompt loop with the explicit (n+1) x (n+1) mask (eqs. 2-4)."""
    out = []
    n = Z0.shape[2] - 1
    M = np.diag(np.r_[np.ones(n), 0.0])
    for Z in Z0:
        for Pl, Ql in zip(P, Q):
            s = Z.T @ Ql @ Z
            Z = Z + Pl @ Z @ M @ (np.maximum(s, 0) if relu else s) / n
        out.append(Z)
    return np.array(out)


@pytest.mark.parametrize("activation", [None, "relu"])
@pytest.mark.parametrize("L", [1, 3])
def test_forward_matches_naive_loop(activation, L):
    rng, pr = _prompts()
    d = pr.d
    P = rng.standard_normal((L, d + 1, d + 1)) * 0.5
    Q = rng.standard_normal((L, d + 1, d + 1)) * 0.5
    Z0 = pr.tokens()
    got = lt.forward(Z0, P, Q, activation)
    want = _naive(Z0, P, Q, relu=activation == "relu")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())
    np.testing.assert_allclose(lt.predict(Z0, P, Q, activation), -want[:, d, -1],
                               atol=1e-12 * np.abs(want).max())
    allZ = lt.forward(Z0, list(P), list(Q), activation, return_all=True)
    assert allZ.shape == (L + 1,) + Z0.shape
    np.testing.assert_array_equal(allZ[0], Z0)


def test_layer_builders():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((2, 3, 3))
    B = rng.standard_normal((2, 3, 3))
    P, Q = lt.sparse_layers(list(A))
    E = np.zeros((4, 4))
    E[3, 3] = 1.0
    for l in range(2):
        np.testing.assert_array_equal(P[l], E)
        np.testing.assert_array_equal(Q[l][:3, :3], -A[l])       # eq. 8: minus sign
        assert not Q[l][3].any() and not Q[l][:, 3].any()
    P, Q = lt.general_layers(A, B)
    for l in range(2):
        np.testing.assert_array_equal(P[l][:3, :3], B[l])
        assert P[l][3, 3] == 1.0 and not P[l][3, :3].any() and not P[l][:3, 3].any()
        np.testing.assert_array_equal(Q[l][:3, :3], A[l])        # eq. 11: no minus sign
    # eq. 11 with B = 0 and -A is eq. 8
    P8, Q8 = lt.sparse_layers(A)
    P11, Q11 = lt.general_layers(-A, np.zeros_like(A))
    np.testing.assert_array_equal(P8, P11)
    np.testing.assert_array_equal(Q8, Q11)


def test_lemma1_transpose():
    rng, pr = _prompts(n=9, batch=50)
    A = rng.standard_normal((3, 5, 5)) * 0.1
    tf = lt.predict(pr.tokens(), *lt.sparse_layers(A))
    gd = lt.preconditioned_gd(pr, np.transpose(A, (0, 2, 1)))
    np.testing.assert_allclose(tf, gd.prediction, atol=1e-12 * np.abs(tf).max())
    assert np.abs(lt.preconditioned_gd(pr, A).prediction - tf).max() > 1e-3
    # (X, y) input with y of shape (B, n) or (B, n + 1)
    gd2 = lt.preconditioned_gd((pr.X, pr.y[:, :-1]), np.transpose(A, (0, 2, 1)))
    np.testing.assert_array_equal(gd2.prediction, gd.prediction)
    assert gd.iterates.shape == (4, 50, 5)


def test_dist_to_identity():
    assert lt.dist_to_identity(3 * np.eye(4)) == pytest.approx(0.0, abs=1e-15)
    Sinv = np.linalg.inv(np.diag([1, 1, 0.25, 0.0625, 1]))
    assert lt.dist_to_identity(Sinv) == pytest.approx(0.785, abs=1e-3)


@pytest.mark.parametrize("call, name", [
    (lambda Z, P, Q: lt.forward(Z[0, 0], P, Q), "Z0"),
    (lambda Z, P, Q: lt.forward(Z, P[0], Q), "P"),
    (lambda Z, P, Q: lt.forward(Z, P, Q[:, :3, :3]), "Q"),
    (lambda Z, P, Q: lt.forward(Z, P, Q[:1]), "Q"),
    (lambda Z, P, Q: lt.forward(Z, P, Q, activation="softmax"), "activation"),
    (lambda Z, P, Q: lt.forward(Z * np.nan, P, Q), "Z0"),
    (lambda Z, P, Q: lt.sparse_layers(np.ones((2, 3, 4))), "A_list"),
    (lambda Z, P, Q: lt.general_layers(np.ones((2, 3, 3)), np.ones((1, 3, 3))), "B_list"),
    (lambda Z, P, Q: lt.preconditioned_gd("x", np.ones((1, 5, 5))), "data"),
    (lambda Z, P, Q: lt.preconditioned_gd((np.ones((2, 5, 4)), np.ones((2, 7))),
                                          np.ones((1, 5, 5))), "y"),
], ids=["Z0-shape", "P-single-matrix", "Q-size", "Q-layers", "activation", "Z0-nan", "A_list",
        "B_list", "data", "y"])
def test_validation(call, name):
    _, pr = _prompts()
    Z = pr.tokens()
    P = np.zeros((2, 6, 6))
    Q = np.zeros((2, 6, 6))
    with pytest.raises(ValueError, match=f"^{name}"):
        call(Z, P, Q)


# -- torch ------------------------------------------------------------------------------
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("par", lt.PARAMETRISATIONS)
def test_torch_forward_matches_numpy(par):
    rng, pr = _prompts(batch=20)
    g = torch.Generator().manual_seed(3)
    m = lt.LinearTransformer(5, 3, par).init_(g, 0.4)
    Z0 = pr.tokens()
    P, Q = (t.detach().numpy() for t in m.matrices())
    with torch.no_grad():
        got = m(torch.as_tensor(Z0)).numpy()
        pred = m.predict(torch.as_tensor(Z0)).numpy()
    want = lt.forward(Z0, P, Q)
    np.testing.assert_allclose(got, want, atol=1e-12 * np.abs(want).max())
    np.testing.assert_allclose(pred, -want[:, 5, -1], atol=1e-12 * np.abs(want).max())
    if par == "sparse":
        np.testing.assert_allclose(P, lt.sparse_layers(m.A_matrices())[0])
        np.testing.assert_allclose(Q, lt.sparse_layers(m.A_matrices())[1])
    if par == "gdpp":
        Pg, Qg = lt.general_layers(-m.A_matrices(), m.B_matrices())
        np.testing.assert_allclose(P, Pg)
        np.testing.assert_allclose(Q, Qg)


def test_torch_sampler_law():
    Sigma = np.diag([1.0, 0.5, 0.25])
    g = torch.Generator().manual_seed(0)
    tb = lt.sample_tokens_torch(Sigma, 4, 40000, generator=g)
    Z = tb.Z.numpy()
    x = Z[:, :3, :].transpose(0, 2, 1).reshape(-1, 3)
    np.testing.assert_allclose(np.cov(x.T), Sigma, atol=0.02)
    assert np.all(Z[:, 3, -1] == 0)
    # E y^2 = tr(Sigma Sigma^{-1}) = d for w ~ N(0, Sigma^{-1})
    assert np.mean(tb.y_q.numpy() ** 2) == pytest.approx(3.0, rel=0.05)


@pytest.mark.parametrize("task", ["inverse", "identity"])
def test_torch_sampler_labels_are_one_linear_task_per_prompt(task):
    # a rotated covariance: every label of a prompt (query included) is w^T x with one w, and
    # w ~ N(0, Sigma^-1) ("inverse") or N(0, I) ("identity")
    rng = np.random.default_rng(1)
    O = np.linalg.qr(rng.standard_normal((3, 3)))[0]
    Sigma = O @ np.diag([1.0, 0.5, 0.25]) @ O.T
    g = torch.Generator().manual_seed(0)
    tb = lt.sample_tokens_torch(Sigma, 5, 20000, generator=g, task=task)
    Z = tb.Z.numpy()
    X, y = Z[:, :3, :5], Z[:, 3, :5]                   # context columns and labels
    w = np.linalg.solve(X[:, :, :3].transpose(0, 2, 1), y[:, :3, None])[:, :, 0]   # from 3 of the 5 labels
    np.testing.assert_allclose(np.einsum("bd,bdn->bn", w, X), y, atol=1e-6 * np.abs(y).max())
    np.testing.assert_allclose(np.einsum("bd,bd->b", w, Z[:, :3, 5]), tb.y_q.numpy(), atol=1e-6 * np.abs(y).max())
    cov_w = np.cov(w.T)
    target = np.linalg.inv(Sigma) if task == "inverse" else np.eye(3)
    np.testing.assert_allclose(cov_w, target, atol=0.1 * np.abs(target).max())


def test_torch_validation():
    with pytest.raises(ValueError, match="^parametrisation"):
        lt.LinearTransformer(3, 2, "dense")
    with pytest.raises(ValueError, match="^d"):
        lt.LinearTransformer(0, 2)
    m = lt.LinearTransformer(3, 2, "sparse")
    with pytest.raises(ValueError, match="^Z"):
        m(torch.zeros(2, 3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="^A"):
        m.load_(A=np.zeros((1, 3, 3)))
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="^Sigma"):
        lt.train_adam(m, np.eye(4), 5, steps=1, batch=2, lr=0.1, generator=g)
    with pytest.raises(ValueError, match="^lr"):
        lt.train_adam(m, np.eye(3), 5, steps=1, batch=2, lr=-1, generator=g)
    with pytest.raises(ValueError, match="^generator"):
        lt.train_adam(m, np.eye(3), 5, steps=1, batch=2, lr=0.1, generator=0)


def test_same_seed_same_weights():
    def run(seed):
        g = torch.Generator().manual_seed(seed)
        m = lt.LinearTransformer(3, 2, "full").init_(g, 0.1)
        r = lt.train_adam(m, np.diag([1.0, 0.5, 0.2]), 6, steps=20, batch=16, lr=0.01,
                          generator=g, halve_every=5, clip=0.01, log_every=5)
        return r, np.concatenate([p.detach().numpy().ravel() for p in m.parameters()])

    r1, w1 = run(7)
    r2, w2 = run(7)
    _, w3 = run(8)
    np.testing.assert_array_equal(w1, w2)
    np.testing.assert_array_equal(r1.batch_loss[1:], r2.batch_loss[1:])
    assert not np.allclose(w1, w3)
    assert r1.lr[-1] == pytest.approx(0.01 / 16)        # halved at steps 5, 10, 15, 20
    assert r1.A_log.shape == (5, 2, 3, 3)


def test_train_adam_stops_on_a_diverging_loss():
    # a learning rate far too large blows the loss up: the run stops at the first batch loss
    # above stop_above and records where; a sane run with the same guard runs to the end
    Sigma = np.diag([1.0, 0.5, 0.2])
    g = torch.Generator().manual_seed(0)
    m = lt.LinearTransformer(3, 2, "full").init_(g, 1.0)
    r = lt.train_adam(m, Sigma, 6, steps=200, batch=64, lr=5.0, generator=g, log_every=50,
                      stop_above=1e3)
    assert r.stopped_at is not None and r.stopped_at < 200
    assert r.step[-1] == r.stopped_at
    assert not r.batch_loss[-1] <= 1e3               # above the bound, or non-finite
    # a torch check turns a stopped run into a failed outcome that says where it stopped
    from verify.models.preconditioned_gd_training import loss_trajectory, stopped_outcome
    out = stopped_outcome(r, "test run.", {"L": 2})
    assert out.passed is False and out.measured["stopped at step"] == r.stopped_at
    assert f"step {r.stopped_at}" in out.criterion
    traj = out.details["batch loss"]
    assert traj[-1][0] == r.stopped_at and [k for k, _ in traj] == sorted({k for k, _ in traj})
    assert len(loss_trajectory(r, points=3)) <= 4
    g = torch.Generator().manual_seed(0)
    m = lt.LinearTransformer(3, 1, "sparse").init_(g, 1e-3)
    r = lt.train_adam(m, Sigma, 6, steps=50, batch=64, lr=0.01, generator=g, log_every=10,
                      stop_above=1e3)
    assert r.stopped_at is None and r.step[-1] == 50
    with pytest.raises(ValueError, match="^stop_above"):
        lt.train_adam(m, Sigma, 6, steps=1, batch=2, lr=0.1, generator=g, stop_above=-1.0)



def test_train_adam_stall_check():
    # at the stall step a run whose recent mean batch loss is above the bound stops there
    # (stalled_at); a bound above the loss lets it run on to the end
    Sigma = np.diag([1.0, 0.5, 0.2])
    g = torch.Generator().manual_seed(0)
    m = lt.LinearTransformer(3, 1, "sparse").init_(g, 1e-3)
    r = lt.train_adam(m, Sigma, 6, steps=60, batch=64, lr=1e-4, generator=g, log_every=10,
                      stall=(20, 1e-3))
    assert r.stalled_at == 20 and r.stopped_at is None and r.step[-1] == 20
    g = torch.Generator().manual_seed(0)
    m = lt.LinearTransformer(3, 1, "sparse").init_(g, 1e-3)
    r = lt.train_adam(m, Sigma, 6, steps=60, batch=64, lr=1e-4, generator=g, log_every=10,
                      stall=(20, 1e3))
    assert r.stalled_at is None and r.step[-1] == 60 and r.settings["stall"] == (20, 1e3)
    with pytest.raises(ValueError, match="^stall"):
        lt.train_adam(m, Sigma, 6, steps=1, batch=2, lr=0.1, generator=g, stall=(0, 1.0))
    with pytest.raises(ValueError, match="^stall"):
        lt.train_adam(m, Sigma, 6, steps=1, batch=2, lr=0.1, generator=g, stall=5)

def test_train_adam_in_the_models_precision():
    # prompts are sampled in the model's dtype: a float32 model trains (it used to fail on a
    # float64 prompt batch) and moves towards the optimum like the float64 one
    Sigma = np.diag([1.0, 0.5, 0.2])
    out = {}
    for dtype in (torch.float32, torch.float64):
        g = torch.Generator().manual_seed(0)
        m = lt.LinearTransformer(3, 1, "sparse", dtype=dtype).init_(g, 1e-3)
        r = lt.train_adam(m, Sigma, 6, steps=200, batch=256, lr=0.05, generator=g, log_every=50)
        assert next(m.parameters()).dtype == dtype
        out[dtype] = r.batch_loss[-1]
    assert np.isfinite(out[torch.float32])
    assert out[torch.float32] < 0.8 * 3.0            # below E y^2 = d at A = 0


@pytest.mark.parametrize("par", lt.PARAMETRISATIONS)
@pytest.mark.parametrize("L", [1, 2, 4])
def test_gram_recursion_predict_matches_full_forward(par, L):
    # predict evolves (query column, context Gram) instead of the whole token matrix: the same
    # function of Z and of every trained entry, so values and gradients agree to round-off
    _, pr = _prompts(batch=30)
    Z = torch.as_tensor(pr.tokens())
    g = torch.Generator().manual_seed(L)
    m = lt.LinearTransformer(5, L, par).init_(g, 0.3)
    y = torch.as_tensor(pr.target)

    def grads(loss):
        m.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in m.parameters()], float(loss.detach())

    g_fast, l_fast = grads(torch.mean((m.predict(Z) - y) ** 2))
    g_full, l_full = grads(torch.mean((-m(Z)[:, 5, -1] - y) ** 2))
    assert l_fast == pytest.approx(l_full, rel=1e-12)
    scale = max(float(b.abs().max()) for b in g_full)
    assert scale > 0
    for a, b in zip(g_fast, g_full):             # (B_{L-1} of "gdpp" gets none: footnote 4)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-11 * scale)
    # the recursion needs every layer: dropping the last layer's update changes the value
    P, Q = m.matrices()
    if L > 1:
        short = lt._predict_gram(P[:-1], Q[:-1], Z)
        assert float((short - m.predict(Z)).detach().abs().max()) > 1e-3


@pytest.mark.parametrize("L", [1, 2])
def test_full_closed_form_gradient_matches_autograd(L):
    # train_adam steps the full parametrisation with L <= 2 by the closed-form loss gradient:
    # the same loss and gradients as autograd through the full forward pass (eqs. 2-4)
    _, pr = _prompts(batch=30)
    Z = torch.as_tensor(pr.tokens())
    y = torch.as_tensor(pr.target)
    m = lt.LinearTransformer(5, L, "full").init_(torch.Generator().manual_seed(L), 0.3)
    loss = torch.mean((-m(Z)[:, 5, -1] - y) ** 2)
    loss.backward()
    with torch.no_grad():
        value, gP, gQ = lt._full_loss_grad(m.P, m.Q, Z, y)
    assert float(value) == pytest.approx(float(loss.detach()), rel=1e-12)
    scale = max(float(m.P.grad.abs().max()), float(m.Q.grad.abs().max()))
    assert scale > 0
    np.testing.assert_allclose(gP.numpy(), m.P.grad.numpy(), rtol=0, atol=1e-11 * scale)
    np.testing.assert_allclose(gQ.numpy(), m.Q.grad.numpy(), rtol=0, atol=1e-11 * scale)
    for l in range(L):                           # every layer gets a gradient (not all zero)
        assert float(gP[l].abs().max()) > 1e-3 and float(gQ[l].abs().max()) > 1e-3


@pytest.mark.parametrize("parametrisation, L", [("sparse", 1), ("sparse", 2), ("sparse", 3), ("gdpp", 2)])
def test_block_closed_form_gradient_matches_autograd(parametrisation, L):
    # train_adam steps the sparse parametrisation and GD++ with L = 2 by closed-form loss
    # gradients: the same loss and gradients as autograd through the full forward pass (eqs. 2-4)
    _, pr = _prompts(batch=30)
    Z = torch.as_tensor(pr.tokens())
    y = torch.as_tensor(pr.target)
    m = lt.LinearTransformer(5, L, parametrisation).init_(torch.Generator().manual_seed(L), 0.3)
    loss = torch.mean((-m(Z)[:, 5, -1] - y) ** 2)
    loss.backward()
    with torch.no_grad():
        if parametrisation == "sparse":
            value, *grads = lt._sparse_loss_grad(m.A, Z, y)
        else:
            value, *grads = lt._gdpp2_loss_grad(m.A, m.B, Z, y)
    assert float(value) == pytest.approx(float(loss.detach()), rel=1e-12)
    params = list(m.parameters())
    scale = max(float(p.grad.abs().max()) for p in params)
    assert scale > 0
    for g, p in zip(grads, params):
        np.testing.assert_allclose(g.numpy(), p.grad.numpy(), rtol=0, atol=1e-11 * scale)
    for l in range(L):                           # every layer's A gets a gradient (not all zero)
        assert float(grads[0][l].abs().max()) > 1e-3
    if parametrisation == "gdpp":                # B_0 too; B_1 never reaches the output
        assert float(grads[1][0].abs().max()) > 1e-3 and float(grads[1][1].abs().max()) == 0.0


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # raised inside torch.compile
def test_train_adam_compiled_matches_eager():
    # torch.compile changes only the evaluation: the same seed gives the same run to round-off
    Sigma = np.diag([1.0, 0.5, 0.2])
    out = []
    for compile in (False, True):
        g = torch.Generator().manual_seed(0)
        m = lt.LinearTransformer(3, 2, "gdpp").init_(g, 0.1)
        r = lt.train_adam(m, Sigma, 6, steps=30, batch=64, lr=0.01, generator=g, log_every=10,
                          compile=compile)
        assert r.settings["compile"] is compile
        out.append(r)
    np.testing.assert_allclose(out[1].batch_loss[1:], out[0].batch_loss[1:], rtol=1e-9)
    np.testing.assert_allclose(out[1].B_log, out[0].B_log, rtol=1e-7, atol=1e-12)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="^compile"):
        lt.train_adam(lt.LinearTransformer(3, 1), Sigma, 6, steps=1, batch=2, lr=0.1,
                      generator=g, compile="yes")
