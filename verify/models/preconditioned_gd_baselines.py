"""The baselines of Figs. 6-7 of Ahn, Cheng, Daneshmand, Sra 2023 (App. D), as closed forms and as
algorithms run on sampled prompts.

Data model of Theorems 3-4: ``x ~ N(0, Sigma)``, ``w* ~ N(0, Sigma^{-1})``, noiseless, ``n``
context examples, ``d = 5``. Every curve of the figures has a registered closed form
(:func:`baseline_losses`):

- least squares (the authors' OLS): ``preconditioned_gd.least_squares.loss``, ``d - min(n, d)``;
- Sigma^{-1}-preconditioned GD with the optimal per-layer steps (Theorem 3):
  ``preconditioned_gd.multi_layer.optimal_loss``;
- Sigma^{-1}-preconditioned GD with one constant step (the figures' "L-step preconditioned GD",
  step "found by grid search"): whitening makes it plain GD at ``Sigma = I``, so its loss and best
  step are ``preconditioned_gd.multi_layer.gd_optimal_loss`` / ``gd_optimal_step`` at ``Sigma = I``;
- plain GD with its best constant step: ``gd_optimal_loss`` / ``gd_optimal_step`` at Sigma.

:func:`conditional_losses` runs the trained transformer and the two constant-step algorithms (the
sparse transformer of eq. 8 with ``A_l = a Sigma^{-1}`` and ``A_l = eta I``, Lemma 1) on the same
held-out contexts, with the query and the task integrated out exactly (one forward pass per
context, :func:`response_matrix`); :func:`mc_algorithm_loss` runs minimum-norm least squares
(:func:`min_norm_solution`).
"""

from __future__ import annotations

import functools

import numpy as np

from verify import validate
from verify.stats import MeanEstimate, batch_mean
from verify.stats import evaluate as _cf

__all__ = ["PGD_OPT", "GD_LOSS", "GD_STEP", "GD_OPT", "OLS", "CODE_GRID_GD", "CODE_GRID_PGD", "baseline_losses",
           "response_matrix", "conditional_losses", "conditional_loss_values", "min_norm_solution",
           "mc_algorithm_loss"]

PGD_OPT = "preconditioned_gd.multi_layer.optimal_loss"
GD_LOSS = "preconditioned_gd.multi_layer.gd_loss"
GD_STEP = "preconditioned_gd.multi_layer.gd_optimal_step"
GD_OPT = "preconditioned_gd.multi_layer.gd_optimal_loss"
OLS = "preconditioned_gd.least_squares.loss"

#: The authors' step grids (``variable_N_exp``/``variable_L_exp`` notebooks), applied to the
#: unnormalised gradient ``X^T X w - X^T y`` of the ``n - 1`` examples they use: ``a = eta (n - 1)``
#: in the eq.-8 convention. Fig. 6: GD on the first grid, PGD on the second; Fig. 7 swaps them.
CODE_GRID_GD = (0.001, 0.002, 0.004, 0.008, 0.01, 0.02, 0.04, 0.08, 0.16)
CODE_GRID_PGD = (0.008, 0.01, 0.02, 0.04, 0.08, 0.16)


def baseline_losses(eigenvalues, n: int, L: int, grid=CODE_GRID_PGD) -> dict:
    """The closed-form curves of Figs. 6-7 at one ``(n, L)`` (``d = len(eigenvalues)``; every value
    depends on Sigma through its eigenvalues only): OLS, Theorem 3's optimum, constant-step PGD and
    plain GD with their best steps, and the authors' code version of constant-step PGD (``n - 1``
    examples, the best step of ``grid``) and of OLS (``n - 1`` examples).

    Deterministic and costly at L = 3, 4 (0.1-0.5 s: Wishart word moments, polynomial roots): the
    values are computed once per process and argument tuple (a fresh dict each call)."""
    return dict(_baseline_losses(tuple(float(x) for x in eigenvalues), int(n), int(L),
                                 tuple(float(x) for x in grid)))


@functools.lru_cache(maxsize=256)
def _baseline_losses(lam: tuple, n: int, L: int, grid: tuple) -> dict:
    lam = list(lam)
    d, eye = len(lam), [1.0] * len(lam)
    # gd_optimal_loss is gd_loss at gd_optimal_step (its definition; the same float64 value): each
    # best step is found once (the polynomial roots of f' cost most of the time at L = 3, 4)
    a_star = float(_cf(GD_STEP, Sigma=eye, n=n, L=L))
    eta_star = float(_cf(GD_STEP, Sigma=lam, n=n, L=L))
    out = {"OLS": float(_cf(OLS, n=n, d=d)),
           "PGD, optimal steps (Theorem 3)": float(_cf(PGD_OPT, n=n, d=d, L=L)),
           "PGD, one step": float(_cf(GD_LOSS, Sigma=eye, n=n, eta=a_star, L=L)),
           "plain GD, best step": float(_cf(GD_LOSS, Sigma=lam, n=n, eta=eta_star, L=L)),
           "PGD step a*": a_star,
           "plain GD step eta*": eta_star}
    if n > 1:
        steps = np.asarray(grid, dtype=float) * (n - 1)
        out["code: PGD, grid step, n - 1 examples"] = float(np.min(_cf(GD_LOSS, Sigma=eye, n=n - 1, eta=steps, L=L)))
        out["code: OLS, n - 1 examples"] = float(_cf(OLS, n=n - 1, d=d))
    else:
        out["code: PGD, grid step, n - 1 examples"] = out["code: OLS, n - 1 examples"] = float(d)
    return out


def response_matrix(X, A, B) -> np.ndarray:
    """``R`` with ``TF_L = x_q^T R w*`` for the GD++ transformer of eq. 11 (``Q_l = [[A_l, 0], [0, 0]]``,
    ``P_l = [[B_l, 0], [0, 1]]``; the sparse layers of eq. 8 are ``A_l -> -A_l``, ``B_l = 0``) on the
    contexts ``X`` (shape ``(batch, d, n)``), noiseless labels ``y_i = <x_i, w*>``.

    The prediction is linear in the task (the label row never enters the attention scores, ``Q``'s
    label block being 0) and in the query (the query column is never a key: ``M = diag(I_n, 0)``).
    So one pass with ``d`` label rows (``w* = e_j``: the label rows are ``X`` itself) and ``d`` query
    columns (``x_q = e_i``) gives every entry: ``R_ij = -[Z_L]_{d + j, n + i}`` (eq. 4's sign).
    Shape ``(batch, d, d)``.

    The pass runs on d x d matrices only: a layer maps every column alike, covariate rows ``X <- M_l X``
    with ``M_l = I + B_l S A_l`` and label rows ``Y <- Y + K A_l X``, where ``S = (1/n) X_c X_c^T`` and
    ``K = (1/n) Y_c X_c^T`` (``Y_c = X_c`` at the start); so ``S <- M_l S M_l^T``, ``K <- (K + K A_l S)
    M_l^T``, and the query block (``X_q = I``, ``Y_q = 0`` at the start) follows the same maps (the
    context columns' recursion of eq. 57; the same values as the token-matrix pass to round-off)."""
    X = np.asarray(X, dtype=float)
    size, d, n = X.shape
    S = X @ X.transpose(0, 2, 1) / n                               # (1/n) X_c X_c^T
    K = S                                                          # (1/n) Y_c X_c^T, Y_c = X_c
    Xq = np.broadcast_to(np.eye(d), (size, d, d))                  # query columns x_q = e_1..e_d
    Yq = np.zeros((size, d, d))
    layers = list(zip(np.asarray(A, dtype=float), np.asarray(B, dtype=float)))
    for l, (Al, Bl) in enumerate(layers):
        Yq = Yq + K @ (Al @ Xq)
        if l == len(layers) - 1:
            break
        KAS = K @ (Al @ S)
        if Bl.any():                       # B_l = 0 (the sparse layers of eq. 8) leaves the covariate rows
            MI = Bl @ (S @ Al)                                     # M_l - I
            Xq = Xq + MI @ Xq
            K = (K + KAS) + (K + KAS) @ MI.transpose(0, 2, 1)
            SM = S + S @ MI.transpose(0, 2, 1)
            S = SM + MI @ SM
        else:
            K = K + KAS
    return -Yq.transpose(0, 2, 1)


def conditional_losses(rng, Sigma, n: int, total: int, models: dict, *, chunk: int = 20_000) -> dict:
    """Losses of several models (``name -> (A, B)``, eq.-11 convention) on the same held-out contexts
    (``{name: MeanEstimate}``, and for every pair ``{(a, b): MeanEstimate of e_a - e_b}``, paired), with
    ``(x_q, w*)`` integrated out: per context the exact
    ``E[(TF_L - y_q)^2 | X] = tr(Sigma (R - I) Sigma^{-1} (R - I)^T)`` (``R``:
    :func:`response_matrix`; ``x_q ~ N(0, Sigma)``, ``w* ~ N(0, Sigma^{-1})`` independent), so
    the per-context values vary only with the context. At ``n = 20``, two PGD layers (``a = 0.6``),
    2e4 contexts: ``0.6176 +- 0.0011`` against the closed form 0.6183; per-prompt errors of as many
    prompts have a s.e. of about 0.009."""
    from verify.stats import chunks

    Sigma = validate.covariance("Sigma", Sigma)
    d = Sigma.shape[0]
    C, Si, eye = np.linalg.cholesky(Sigma), np.linalg.inv(Sigma), np.eye(d)
    names = list(models)
    pairs = [(x, y) for i, x in enumerate(names) for y in names[i + 1:]]
    acc = batch_mean()
    for size in chunks(total, chunk):
        X = np.einsum("ij,bjk->bik", C, rng.standard_normal((size, d, n)))
        e = {}
        for k in names:
            D = response_matrix(X, *models[k]) - eye
            e[k] = np.einsum("bjk,bjk->b", Sigma @ D, D @ Si)   # tr(Sigma D Si D^T)
        acc.add(np.stack([e[k] for k in names] + [e[x] - e[y] for x, y in pairs], axis=1))
    est = acc.result()
    cols = names + pairs
    return {k: MeanEstimate(est.mean[i], est.se[i], est.n) for i, k in enumerate(cols)}


def conditional_loss_values(rng, Sigma, n: int, total: int, models: dict, *, chunk: int = 20_000):
    """Per-context values of :func:`conditional_losses` (``(x_q, w*)`` integrated out exactly) and the
    largest eigenvalue of each context's white covariance ``S_u = (1/n) U U^T`` (``X = C U``, ``Sigma =
    C C^T``): ``({name: ndarray (total,)}, ndarray (total,))``. Used where the mean is carried by rare
    contexts (three and four GD++ layers, Fig. 7): the values are summarised on the contexts with
    ``lambda_max(S_u)`` below a stated level. Draws the contexts as :func:`conditional_losses` does."""
    from verify.stats import chunks

    Sigma = validate.covariance("Sigma", Sigma)
    total = validate.integer("total", total)
    d = Sigma.shape[0]
    C, Si, eye = np.linalg.cholesky(Sigma), np.linalg.inv(Sigma), np.eye(d)
    out, top = {k: [] for k in models}, []
    for size in chunks(total, chunk):
        U = rng.standard_normal((size, d, n))
        top.append(np.linalg.eigvalsh(U @ U.transpose(0, 2, 1) / n)[:, -1])
        X = np.einsum("ij,bjk->bik", C, U)
        for k in models:
            D = response_matrix(X, *models[k]) - eye
            out[k].append(np.einsum("bjk,bjk->b", Sigma @ D, D @ Si))
    return {k: np.concatenate(v) for k, v in out.items()}, np.concatenate(top)


def min_norm_solution(X, y) -> np.ndarray:
    """The minimum-norm ``w`` with ``X^T w`` closest to ``y`` (``pinv(X^T) y``) per prompt, for contexts
    ``X`` (batch, d, n) of full rank ``min(n, d)`` (Gaussian covariates: almost surely) and labels ``y``
    (batch, n): ``X (X^T X)^{-1} y`` for ``n < d`` (the interpolant in the row space), the solution of
    ``X^T w = y`` for ``n = d`` and ``(X X^T)^{-1} X y`` for ``n > d`` (least squares), by batched solves
    of ``min(n, d)``-square systems. The values of ``pinv`` (an SVD per prompt) to round-off (tests),
    about a tenth of its time at d = 5."""
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    d, n = X.shape[1], X.shape[2]
    Xt = X.transpose(0, 2, 1)
    if n < d:
        return (X @ np.linalg.solve(Xt @ X, y[:, :, None]))[:, :, 0]
    if n == d:
        return np.linalg.solve(Xt, y[:, :, None])[:, :, 0]
    return np.linalg.solve(X @ Xt, X @ y[:, :, None])[:, :, 0]


def mc_algorithm_loss(rng, Sigma, n: int, total: int, algorithm: str, *, chunk: int = 20_000):
    """Squared query errors of minimum-norm least squares run on sampled prompts (inverse task), as a
    :class:`verify.stats.MeanEstimate`.

    ``algorithm``: ``"ols"`` (on the whitened covariates ``C^{-1} x``, ``Sigma = C C^T``, mapped back:
    the authors' OLS) or ``"ols_raw"`` (minimum norm in the raw coordinates). The solution per prompt is
    :func:`min_norm_solution` (``pinv`` to round-off).
    """
    from verify.tasks.preconditioned_gd import iter_prompts

    if algorithm not in ("ols", "ols_raw"):
        raise ValueError(f"algorithm: expected 'ols' or 'ols_raw', got {algorithm!r}")
    Sigma = validate.covariance("Sigma", Sigma)
    Ci = np.linalg.inv(np.linalg.cholesky(Sigma))
    acc = batch_mean()
    for pr in iter_prompts(rng, Sigma, n, total, task="inverse", chunk=chunk):
        y = pr.y[:, :n]
        X = pr.context if algorithm == "ols_raw" else np.einsum("ij,bjk->bik", Ci, pr.context)
        w = min_norm_solution(X, y)
        if algorithm == "ols":
            w = np.einsum("ji,bj->bi", Ci, w)                      # back to raw: w = C^{-T} v
        acc.add((np.einsum("bi,bi->b", pr.query, w) - pr.target) ** 2)
    return acc.result()
