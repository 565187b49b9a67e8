"""The baselines of Figs. 6-7 of Ahn, Cheng, Daneshmand, Sra 2023 (App. D): least squares in context,
L-step Sigma^{-1}-preconditioned GD with one constant step (plain GD at Sigma = I), the held-out
evaluation of :mod:`verify.models.preconditioned_gd_baselines`, and the side-by-side GD++ sweep.

Reference values are independent of the code under test: the rank of Gaussian vectors, the hand
formula of one step, Theorem 3's multi-layer loss at equal steps (the Gauss rule of the white
Wishart measure, against gd_loss's correlated-Wishart loop equations), and the transformer of
:mod:`verify.models.linear_transformer`.
"""

import mpmath
import numpy as np
import pytest

import theory

OLS = "preconditioned_gd.least_squares.loss"
GD_LOSS = "preconditioned_gd.multi_layer.gd_loss"
GD_STEP = "preconditioned_gd.multi_layer.gd_optimal_step"
GD_OPT = "preconditioned_gd.multi_layer.gd_optimal_loss"
EYE = [1.0] * 5


def _cf(id, *args, **kw):
    return theory.get(id)(*args, **kw)


# -- least squares ------------------------------------------------------------------------------
@pytest.mark.parametrize("n, d, want", [(1, 5, 4), (4, 5, 1), (5, 5, 0), (20, 5, 0), (3, 3, 0), (2, 9, 7)])
def test_least_squares_loss_is_d_minus_the_rank(n, d, want):
    assert _cf(OLS, n=n, d=d) == want
    with mpmath.workdps(30):
        assert _cf(OLS, "mpmath", n=n, d=d) == want


# -- constant-step preconditioned GD: plain GD at Sigma = I ----------------------------------------
@pytest.mark.parametrize("L", [1, 2, 3, 4])
def test_one_step_pgd_is_theorem3_loss_at_equal_steps(L):
    """Whitening: L steps of Sigma^{-1}-preconditioned GD with one step a have the loss of Theorem 3's
    set at a_l = a (multi_layer.loss, Gauss rule) and of plain GD at Sigma = I (gd_loss)."""
    for a in (0.3, 0.7, 1.1):
        assert _cf(GD_LOSS, Sigma=EYE, n=20, eta=a, L=L) == pytest.approx(
            _cf("preconditioned_gd.multi_layer.loss", n=20, d=5, a=[a] * L), rel=1e-12)


def test_one_step_by_hand():
    """L = 1: f(a) = d - 2 a d + a^2 d (n + d + 1)/n (m_1 = d, m_2 = d (n + d + 1)/n); a* = n/(n+d+1)."""
    for n, d, a in [(20, 5, 0.7), (3, 8, 0.2), (50, 2, 1.3)]:
        assert _cf(GD_LOSS, Sigma=[1.0] * d, n=n, eta=a, L=1) == pytest.approx(
            d - 2 * a * d + a**2 * d * (n + d + 1) / n, rel=1e-13)
        assert _cf(GD_STEP, Sigma=[1.0] * d, n=n, L=1) == pytest.approx(n / (n + d + 1), rel=1e-13)


@pytest.mark.parametrize("L", [2, 3, 4])
def test_one_step_is_worse_than_theorem3_optimum(L):
    """n = 20, d = 5: the one-step losses 0.4990, 0.2683, 0.1633 against Theorem 3's 0.3612, 0.1336,
    0.0550 (the values of the former constant-step root finder, exact rational coefficients)."""
    f_one = _cf(GD_OPT, Sigma=EYE, n=20, L=L)
    assert f_one > _cf("preconditioned_gd.multi_layer.optimal_loss", n=20, d=5, L=L) * 1.3
    assert f_one == pytest.approx({2: 0.49900738800725614, 3: 0.26834221784644985, 4: 0.16325338153156654}[L],
                                  rel=1e-12)


def test_baseline_curves_are_the_records():
    from verify.models.preconditioned_gd_baselines import baseline_losses

    lam = [1.0, 1.0, 0.25, 0.0625, 1.0]
    b = baseline_losses(lam, 20, 2)
    assert b["OLS"] == 0 and b["PGD, one step"] == pytest.approx(0.49900738800725614, rel=1e-12)
    assert b["plain GD, best step"] == pytest.approx(_cf(GD_OPT, Sigma=lam, n=20, L=2), rel=1e-14)
    # the authors' code: n - 1 = 19 examples, steps eta (n - 1) on their grid, never better than the best step
    assert b["code: PGD, grid step, n - 1 examples"] >= _cf(GD_OPT, Sigma=EYE, n=19, L=2)
    assert b["code: OLS, n - 1 examples"] == 0 and baseline_losses(lam, 3, 1)["code: OLS, n - 1 examples"] == 3
    # computed once per argument tuple (any sequence type), handed out as a fresh dict each time
    b["OLS"] = -1.0
    again = baseline_losses(tuple(lam), 20, 2)
    assert again["OLS"] == 0 and again is not b and again == {**b, "OLS": 0.0}


# -- verify: the algorithms on sampled prompts ---------------------------------------------------------
def test_conditional_pairs_are_the_differences_and_the_runs_match_the_closed_forms():
    from verify.models.preconditioned_gd_baselines import conditional_losses
    from verify.tasks.preconditioned_gd import distorted_covariance

    rng = np.random.default_rng(0)
    Sigma = distorted_covariance(rng, [1.0, 1.0, 0.25, 0.0625, 1.0])
    a, eta = _cf(GD_STEP, Sigma=EYE, n=20, L=2), _cf(GD_STEP, Sigma=Sigma, n=20, L=2)
    zero = np.zeros((2, 5, 5))
    est = conditional_losses(rng, Sigma, 20, 20_000, {"pgd": (np.stack([-a * np.linalg.inv(Sigma)] * 2), zero),
                                                      "gd": (np.stack([-eta * np.eye(5)] * 2), zero)})
    assert est[("pgd", "gd")].mean == pytest.approx(est["pgd"].mean - est["gd"].mean, rel=1e-12)
    assert abs(est["pgd"].mean - _cf(GD_OPT, Sigma=EYE, n=20, L=2)) < 5 * est["pgd"].se
    assert abs(est["gd"].mean - _cf(GD_OPT, Sigma=Sigma, n=20, L=2)) < 5 * est["gd"].se


def test_least_squares_runs_match_the_closed_form():
    from verify.models.preconditioned_gd_baselines import mc_algorithm_loss

    rng = np.random.default_rng(0)
    Sigma = [1.0, 1.0, 0.25, 0.0625, 1.0]
    assert abs(mc_algorithm_loss(rng, Sigma, 3, 20_000, "ols").mean - 2) < 0.1
    assert mc_algorithm_loss(rng, Sigma, 8, 2_000, "ols").mean < 1e-12
    with pytest.raises(ValueError, match="^algorithm"):
        mc_algorithm_loss(rng, Sigma, 3, 10, "newton")


@pytest.mark.parametrize("n", [1, 2, 4, 5, 8, 20])
def test_min_norm_solution_is_pinv(n):
    """The batched solves give pinv(X^T) y (the minimum-norm least-squares solution) to round-off,
    for n below, at and above d = 5."""
    from verify.models.preconditioned_gd_baselines import min_norm_solution

    rng = np.random.default_rng(n)
    X, y = rng.standard_normal((200, 5, n)), rng.standard_normal((200, n))
    want = np.einsum("bij,bj->bi", np.linalg.pinv(X.transpose(0, 2, 1)), y)
    np.testing.assert_allclose(min_norm_solution(X, y), want, rtol=1e-9, atol=1e-12)


def test_response_matrix_gives_the_transformers_predictions():
    """TF_L = x_q^T R w* for random general (eq. 11) and sparse (eq. 8) layers, to round-off."""
    from verify.models.linear_transformer import general_layers, predict, sparse_layers
    from verify.models.preconditioned_gd_baselines import response_matrix
    from verify.tasks.preconditioned_gd import sample_prompts

    rng = np.random.default_rng(1)
    Sigma = np.diag([1.0, 0.5, 2.0, 0.25])
    pr = sample_prompts(rng, Sigma, 6, 40, task="inverse")
    A, B = 0.3 * rng.standard_normal((3, 4, 4)), 0.3 * rng.standard_normal((3, 4, 4))
    R = response_matrix(pr.context, A, B)
    want = predict(pr.tokens(), *general_layers(A, B))
    assert np.allclose(np.einsum("bi,bij,bj->b", pr.query, R, pr.w), want, rtol=1e-11, atol=1e-11)
    R = response_matrix(pr.context, -A[:2], np.zeros((2, 4, 4)))
    want = predict(pr.tokens(), *sparse_layers(A[:2]))
    assert np.allclose(np.einsum("bi,bij,bj->b", pr.query, R, pr.w), want, rtol=1e-11, atol=1e-11)



def test_conditional_losses_bad_input_names_the_parameter():
    from verify.models.preconditioned_gd_baselines import conditional_losses

    with pytest.raises(ValueError, match="^Sigma"):
        conditional_losses(np.random.default_rng(0), -np.eye(3), 2, 10, {"z": (np.zeros((1, 3, 3)),) * 2})

def test_conditional_loss_values_are_the_per_context_losses():
    """Same draws as conditional_losses: the means agree to round-off; the top eigenvalue is that of the
    white context (the same stream gives the same contexts)."""
    from verify.models.preconditioned_gd_baselines import conditional_loss_values, conditional_losses
    from verify.tasks.preconditioned_gd import distorted_covariance

    Sigma = distorted_covariance(np.random.default_rng(3), [1.0, 1.0, 0.25, 0.0625, 1.0])
    a = _cf(GD_STEP, Sigma=EYE, n=20, L=3)
    models = {"pgd": (np.stack([-a * np.linalg.inv(Sigma)] * 3), np.zeros((3, 5, 5)))}
    est = conditional_losses(np.random.default_rng(4), Sigma, 20, 500, models)
    vals, top = conditional_loss_values(np.random.default_rng(4), Sigma, 20, 500, models)
    assert vals["pgd"].shape == top.shape == (500,)
    assert np.mean(vals["pgd"]) == pytest.approx(est["pgd"].mean, rel=1e-12)
    U = np.random.default_rng(4).standard_normal((500, 5, 20))
    assert np.allclose(top, np.linalg.eigvalsh(U @ U.transpose(0, 2, 1) / 20)[:, -1], rtol=1e-12)
    with pytest.raises(ValueError, match="^total"):
        conditional_loss_values(np.random.default_rng(0), Sigma, 20, 0, models)


def test_quantile_bounds_cover_the_quantile():
    """The order-statistic bounds of torch_fig7_deep bracket the true quantile of a heavy-tailed law
    (Pareto, mean infinite) at z = 3 in at least 99 of 100 draws."""
    from verify.checks.preconditioned_gd.baselines_torch import _quantile_bounds

    rng = np.random.default_rng(0)
    true = 2.0 ** (1 / 0.8) - 1                      # median of Lomax(0.8): (1/2)^(-1/0.8) - 1
    hits = 0
    for _ in range(100):
        lo, est, hi = _quantile_bounds(rng.pareto(0.8, 2000), 0.5, 3.0)
        assert lo <= est <= hi
        hits += lo <= true <= hi
    assert hits >= 99


# -- the side-by-side sweep ------------------------------------------------------------------------
def test_stacked_prediction_is_the_transformer():
    """Values and gradients of gdpp_predict_stacked equal LinearTransformer("gdpp").predict per model."""
    import torch

    from verify.models.linear_transformer import LinearTransformer, sample_tokens_torch
    from verify.models.preconditioned_gd_sweep import gdpp_predict_stacked

    gen = torch.Generator().manual_seed(0)
    d, n, L_max = 4, 6, 3
    models = [LinearTransformer(d, L, "gdpp").init_(gen, 0.3) for L in (1, 2, 3)]
    tok = sample_tokens_torch(np.eye(d), n, 40, generator=gen)
    Zc = tok.Z[:, :, :n]
    G = (Zc @ Zc.transpose(1, 2) / n).expand(3, -1, -1, -1)
    zq = tok.Z[:, :, n].expand(3, -1, -1)
    A = torch.zeros(3, L_max, d, d, dtype=torch.float64)
    B = torch.zeros_like(A)
    for k, m in enumerate(models):
        A[k, :m.L], B[k, :m.L] = m.A.detach(), m.B.detach()
    A.requires_grad_(True)
    B.requires_grad_(True)
    out = gdpp_predict_stacked(A, B, G, zq)
    out.sum().backward()
    for k, m in enumerate(models):
        want = m.predict(tok.Z)
        want.sum().backward()
        assert torch.allclose(out[k], want, rtol=1e-12, atol=1e-12)
        assert torch.allclose(A.grad[k, :m.L], m.A.grad, rtol=1e-10, atol=1e-12)
        assert torch.allclose(B.grad[k, :m.L], m.B.grad, rtol=1e-10, atol=1e-12)


def test_a_model_of_a_sweep_trains_as_it_would_alone():
    """Models of one n share each batch; from the same start and the same data stream, the (2, 8)
    model of a sweep with a (1, 8) model follows its lone run (to round-off), and the layer past the
    second model's depth stays zero."""
    import torch

    from verify.models.preconditioned_gd_sweep import train_gdpp_sweep

    rng = np.random.default_rng(0)
    A0, B0 = (0.05 * rng.standard_normal((2, 2, 3, 3)) for _ in range(2))
    kw = dict(steps=30, batch=50, lr=0.01, clip=0.01, halve_every=10, log_every=5)
    both = train_gdpp_sweep([(2, 8), (1, 8)], [1.0, 0.5, 0.25], generator=torch.Generator().manual_seed(7),
                            init=(A0, B0), **kw)
    alone = train_gdpp_sweep([(2, 8)], [1.0, 0.5, 0.25], generator=torch.Generator().manual_seed(7),
                             init=(A0[:1], B0[:1]), **kw)
    assert np.allclose(both.A_log[:, 0], alone.A_log[:, 0], rtol=0, atol=1e-12)
    assert np.allclose(both.B_log[:, 0], alone.B_log[:, 0], rtol=0, atol=1e-12)
    assert np.allclose(both.batch_loss[1:, 0], alone.batch_loss[1:, 0], rtol=1e-12)
    assert np.all(both.A_log[:, 1, 1] == 0) and np.all(both.B_log[:, 1, 1] == 0)
    assert not np.allclose(both.A_log[-1, 0], A0[0])


@pytest.mark.parametrize("L", [1, 2, 3, 4])
def test_closed_form_sweep_gradient_is_autograds(L):
    """gdpp_loss_grad's losses and weighted-loss gradient equal autograd through gdpp_predict_stacked."""
    import torch

    from verify.models.preconditioned_gd_sweep import gdpp_loss_grad, gdpp_predict_stacked, gram_batch

    rng = np.random.default_rng(L)
    K, d, n, batch = 3, 4, 7, 30
    A0, B0 = (0.3 * rng.standard_normal((K, L, d, d)) for _ in range(2))
    chol = torch.as_tensor(np.linalg.cholesky(np.diag([1.0, 0.5, 0.25, 0.125])))
    gen = torch.Generator().manual_seed(L)
    G, zq, y = (torch.stack(t) for t in zip(*[gram_batch(chol, n, batch, gen) for _ in range(K)]))
    w = np.array([1.0, 0.5, 2.0])
    A, B = torch.tensor(A0, requires_grad=True), torch.tensor(B0, requires_grad=True)
    losses = torch.mean((gdpp_predict_stacked(A, B, G, zq) - y) ** 2, dim=1)
    (losses * torch.as_tensor(w)).sum().backward()
    got, gA, gB = gdpp_loss_grad(A0, B0, G.numpy(), zq.numpy(), y.numpy(), w)
    assert np.allclose(got, losses.detach().numpy(), rtol=1e-12, atol=0)
    assert np.allclose(gA, A.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert np.allclose(gB, np.zeros_like(B0) if B.grad is None else B.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_numpy_gram_batch_is_the_torch_one():
    """The closed-gradient path's prompts are gram_batch's (the same Gaussians), to round-off."""
    import torch

    from verify.models.preconditioned_gd_sweep import _gram_batch_numpy, gram_batch

    chol = np.linalg.cholesky(np.diag([1.0, 0.5, 0.25]))
    want = gram_batch(torch.as_tensor(chol), 6, 20, torch.Generator().manual_seed(3))
    got = _gram_batch_numpy(chol, 6, 20, torch.Generator().manual_seed(3))
    for a, b in zip(want, got):
        assert np.allclose(a.numpy(), b, rtol=1e-12, atol=1e-13)


def test_sweep_batch_per_n_and_closed_gradient():
    """A batch per n: equal batches run as the integer batch (bit for bit); a model whose n has
    twice the batch runs as two rows of the stack, and autograd and the closed-form gradient follow
    the same run (to round-off)."""
    import torch

    from verify.models.preconditioned_gd_sweep import train_gdpp_sweep

    specs, lam = [(2, 3), (3, 8)], [1.0, 0.5, 0.25]
    kw = dict(steps=20, lr=0.01, clip=0.01, halve_every=10, log_every=5)
    one = train_gdpp_sweep(specs, lam, batch=40, generator=torch.Generator().manual_seed(7), **kw)
    same = train_gdpp_sweep(specs, lam, batch={3: 40, 8: 40}, generator=torch.Generator().manual_seed(7), **kw)
    assert np.array_equal(one.A_log, same.A_log) and np.array_equal(one.B_log, same.B_log)
    runs = [train_gdpp_sweep(specs, lam, batch={3: 80, 8: 40}, generator=torch.Generator().manual_seed(7),
                             closed_gradient=c, **kw) for c in (False, True)]
    assert runs[0].settings["batch"] == {3: 80, 8: 40}
    assert np.allclose(runs[0].A_log, runs[1].A_log, rtol=0, atol=1e-10)
    assert np.allclose(runs[0].B_log, runs[1].B_log, rtol=0, atol=1e-10)
    assert np.allclose(runs[0].batch_loss[1:], runs[1].batch_loss[1:], rtol=1e-9)
    assert not np.allclose(runs[0].A_log[-1], one.A_log[-1])
    with pytest.raises(ValueError, match="^batch"):
        train_gdpp_sweep(specs, lam, batch={3: 60, 8: 40}, generator=torch.Generator(), **kw)
    with pytest.raises(ValueError, match="^batch"):
        train_gdpp_sweep(specs, lam, batch={3: 40}, generator=torch.Generator(), **kw)
    with pytest.raises(ValueError, match="^closed_gradient"):
        train_gdpp_sweep(specs, lam, batch=40, generator=torch.Generator(), dtype=torch.float32,
                         closed_gradient=True, **kw)


@pytest.mark.parametrize("specs", [[], [(0, 5)], [(2,)], "ab"])
def test_sweep_refuses_bad_specs(specs):
    import torch

    from verify.models.preconditioned_gd_sweep import train_gdpp_sweep

    with pytest.raises(ValueError, match="^specs"):
        train_gdpp_sweep(specs, [1.0, 1.0], steps=1, batch=2, lr=0.1, generator=torch.Generator())


def test_fig6_deep_batch_below_d_must_be_a_multiple_of_batch():
    """The n < d models' batch runs as rows of the stacked models: a batch that is not a multiple of the
    others' is refused, naming the setting, before any training."""
    from verify.registry import get_check, run_check

    res = run_check(get_check("preconditioned_gd.baselines.torch_fig6_deep"), settings={"batch_below_d": 1000})
    assert not res.passed and res.error.startswith("ValueError: batch_below_d: expected a multiple of batch = 300")
