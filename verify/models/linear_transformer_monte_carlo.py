"""Monte Carlo of the L-layer linear transformer of Ahn, Cheng, Daneshmand, Sra 2023
(Theorems 3-4, App. B.2-B.3): its loss on sampled prompts (layers of eq. 8 or GD++ eq. 11),
per-prompt autograd gradients of every weight entry, and the planar-pairing moments of the
white Wishart matrix (a wrong model, for negative controls).
"""

from __future__ import annotations

import numpy as np

from verify.models.linear_transformer import general_layers, sparse_layers
from verify.stats import batch_mean, chunks
from verify.tasks.preconditioned_gd import Prompts, sample_prompts

__all__ = ["N_PAPER", "D_PAPER", "CHUNK", "STEPS", "OPT_LOSS", "TILT", "planar_moments", "predict_gram",
           "context_gram", "predict_query", "mc_transformer_loss", "tilted_prompts", "per_prompt_gradients",
           "full_gradient_z"]

#: The paper's sizes (§4.3): context length and dimension.
N_PAPER, D_PAPER = 20, 5
#: Prompts per forward call (bounded memory).
CHUNK = 20_000
#: Closed forms of Theorem 3: the optimal step sizes and the loss there.
STEPS = "preconditioned_gd.multi_layer.optimal_steps"
OPT_LOSS = "preconditioned_gd.multi_layer.optimal_loss"


def planar_moments(n: int, d: int, K: int = 6) -> np.ndarray:
    """Wrong model (negative control): only the planar pairings (``r + c = k + 1``), i.e.
    the Marchenko-Pastur moments at finite ``n, d`` without the real-Gaussian corrections:
    ``m_k = sum_r N(k, r) d^r n^(1 - r)`` with the Narayana numbers ``N(k, r) = C(k, r) C(k, r - 1) / k``
    (the planar matchings of :func:`theory.preconditioned_gd.wishart.matching_counts`, equal for
    ``k <= 6``, tests). ``m_1..m_K``."""
    from math import comb

    return np.array([sum(comb(k, r) * comb(k, r - 1) // k * d**r * float(n) ** (1 - r) for r in range(1, k + 1))
                     for k in range(1, K + 1)], dtype=float)


#: Stretch factors of the largest eigenvalue of the whitened context covariance (the importance-sampling
#: mixture, equal weights; the factor 1 keeps every weight below 5).
TILT = (1.0, 1.4, 2.0, 2.8, 4.0)


def _log_density_ratio(lam: np.ndarray, rho: float, n: int, d: int) -> np.ndarray:
    """``log p(lam) - log p(lam with its largest entry divided by rho)`` for the joint eigenvalue density
    of ``S_u`` (real Wishart, ``n >= d``): ``p ~ prod lam_i^((n-d-1)/2) exp(-n lam_i / 2) prod_{i<j}
    |lam_i - lam_j|``; ``inf`` where the largest entry divided by ``rho`` falls below the next one (that
    mixture component cannot produce ``lam``). ``lam`` ascending, shape (B, d)."""
    top, rest = lam[:, -1], lam[:, :-1]
    below = top[:, None] / rho - rest
    ok = np.all(below > 0, axis=1)
    out = ((n - d - 1) / 2) * np.log(rho) - n * top * (1 - 1 / rho) / 2
    out = out + np.sum(np.log(top[:, None] - rest), axis=1) - np.sum(np.log(np.where(below > 0, below, 1.0)), axis=1)
    return np.where(ok, out, np.inf)


def tilted_prompts(rng, Sigma, n: int, B: int, tilt=TILT):
    """Prompts of the Theorem-3/4 data model whose contexts are stretched along their largest principal
    direction, with the importance weights that make averages unbiased for the original law.

    A white context ``G`` (d x n) is ``U diag(sqrt(n lam)) V^T`` with ``U, V`` Haar and independent of the
    eigenvalues ``lam`` of ``S_u = G G^T / n``; ``G -> (I + (sqrt(rho) - 1) v v^T) G`` (``v`` the top
    eigenvector) multiplies the largest eigenvalue by ``rho`` and keeps ``U, V``. With ``rho`` drawn
    from ``tilt`` (equal probabilities) the new eigenvalues have the density ``q = sum_j p(T_j^{-1} lam) /
    (|tilt| rho_j)``, and ``p / q`` (:func:`_log_density_ratio`; bounded by ``|tilt|``) is the weight.
    The covariates are ``C G`` (``Sigma = C C^T``), the query ``C g``, the task ``C^{-T} g'``."""
    from scipy.special import logsumexp

    d = Sigma.shape[0]
    rho = np.asarray(tilt, dtype=float)
    G = rng.standard_normal((B, d, n))
    lam, vec = np.linalg.eigh((G @ G.transpose(0, 2, 1)) / n)         # batched BLAS products (einsum: 2x slower)
    j = rng.integers(0, len(rho), B)
    v = vec[:, :, -1]
    G = G + ((np.sqrt(rho[j]) - 1)[:, None] * v)[:, :, None] * (v[:, None, :] @ G)
    lam[:, -1] *= rho[j]
    terms = np.stack([-np.log(len(rho)) - _log_density_ratio(lam, r, n, d) - np.log(r) for r in rho], axis=1)
    weight = np.exp(-logsumexp(terms, axis=1))
    C = np.linalg.cholesky(Sigma)
    X = np.concatenate([C @ G, (rng.standard_normal((B, d)) @ C.T)[:, :, None]], axis=2)
    w = np.linalg.solve(C.T, rng.standard_normal((B, d)).T).T
    return Prompts(X=X, w=w), weight, lam


def predict_gram(Z0, P, Q) -> np.ndarray:
    """``TF_L(Z_0) = -[Z_L]_{d+1, n+1}`` of the linear transformer (eqs. 2-4), the same function as
    :func:`verify.models.linear_transformer.predict` (tests), by the Gram recursion of
    :meth:`LinearTransformer.predict <verify.models.linear_transformer.LinearTransformer.predict>`.

    A linear layer maps every column by one matrix, ``Z_{l+1} = T_l Z_l`` with ``T_l = I + P_l G_l Q_l``
    and ``G_l = (1/n) Z_{l,c} Z_{l,c}^T`` (the mask keeps the query column out of ``G``), so the query
    column and the context Gram matrix evolve on their own: ``z_{q,l+1} = T_l z_{q,l}``,
    ``G_{l+1} = T_l G_l T_l^T``. Batched products of (d+1) x (d+1) matrices replace the products with
    the (d+1) x (n+1) token matrices: about 5 times faster at ``n = 20, d = 5, L = 3`` (round-off
    differences only, ~1e-15 relative). As in the torch version, the last two layers need
    matrix-vector products only: with ``T = I + P_0 G Q_0`` and ``r^T`` the last row of ``P_1``, the
    prediction is ``-(e^T z_1 + (T^T r)^T G (T^T Q_1 z_1))``, ``z_1 = T z_q``, ``T^T v = v + Q_0^T G
    P_0^T v`` (about 20-30 % less time at L = 2..4, the same values to ~1e-15 of their scale). ``Z0``
    (B, d+1, n+1); ``P, Q`` (L, d+1, d+1); or ``Z0`` the pair ``(G_0, z_q)`` of :func:`context_gram` or
    :meth:`Prompts.gram <verify.tasks.preconditioned_gd.Prompts.gram>` (several layer stacks on the
    same prompts)."""
    G, zq = Z0 if isinstance(Z0, tuple) else context_gram(Z0)
    P, Q = np.asarray(P, dtype=np.float64), np.asarray(Q, dtype=np.float64)
    L = P.shape[0]

    def G_times(v):                                               # G v per prompt, v (B, d+1)
        return np.einsum("bij,bj->bi", G, v)

    def times(v, M):                                              # v^T M per prompt (no threaded GEMM)
        return np.einsum("bi,ij->bj", v, M)

    for l in range(L - 2):                                        # G <- T G T^T, z_q <- T z_q
        T = P[l] @ G @ Q[l]
        T += np.eye(G.shape[1])
        zq = (T @ zq[:, :, None])[:, :, 0]
        G = T @ G @ T.transpose(0, 2, 1)
    if L >= 2:
        P0, Q0, P1, Q1 = P[L - 2], Q[L - 2], P[L - 1], Q[L - 1]
        z1 = zq + times(G_times(times(zq, Q0.T)), P0.T)           # T z_q
        a = P1[-1] + times(G_times(np.broadcast_to(P1[-1] @ P0, zq.shape)), Q0)   # T^T r
        b = times(z1, Q1.T)
        b = b + times(G_times(times(b, P0)), Q0)                  # T^T Q_1 z_1
        return -(z1[:, -1] + np.einsum("bi,bi->b", a, G_times(b)))
    return -(zq[:, -1] + G_times(times(zq, Q[0].T)) @ P[0, -1])


def context_gram(Z0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(G_0, z_q)``: the context's Gram matrix ``(1/n) Z_c Z_c^T`` (B, d+1, d+1) and the query column
    (B, d+1) of token matrices ``Z0`` (B, d+1, n+1), all that :func:`predict_gram` reads of them."""
    Z0 = np.asarray(Z0, dtype=np.float64)
    n = Z0.shape[2] - 1
    Zc = Z0[:, :, :n]
    return (Zc @ Zc.transpose(0, 2, 1)) / n, Z0[:, :, n]


def predict_query(Z0: np.ndarray, P, Q, activation=None) -> np.ndarray:
    """``TF_L(Z_0) = -[Z_L]_{d+1, n+1}`` (eq. 4) of the transformer with linear or ReLU attention (§6),
    the same function as :func:`verify.models.linear_transformer.predict` (tests), computing only the
    query column in the last layer: layers ``0..L-2`` by :func:`~verify.models.linear_transformer.forward`,
    then ``z_{q,L} = z_{q,L-1} + (1/n) P_{L-1} Z_c sigma(Z_c^T Q_{L-1} z_q)`` (the query column of eq. 2;
    the other columns of ``Z_L`` never reach the output). At one layer that skips the ``n x (n+1)``
    score matrix: O(n d) per prompt instead of O(n^2 d). ``Z0`` (B, d+1, n+1); ``P, Q`` (L, d+1, d+1)."""
    from verify.models.linear_transformer import forward

    P, Q = np.asarray(P, dtype=np.float64), np.asarray(Q, dtype=np.float64)
    Z = np.asarray(Z0, dtype=np.float64) if P.shape[0] == 1 else forward(Z0, P[:-1], Q[:-1], activation)
    n = Z.shape[2] - 1
    Zc, zq = Z[:, :, :n], Z[:, :, n]
    scores = (zq @ Q[-1].T)[:, None, :] @ Zc                         # (B, 1, n): (Q z_q)^T z_i
    if activation == "relu":
        scores = np.maximum(scores, 0.0)
    elif activation is not None:
        raise ValueError(f"activation: expected None or 'relu', got {activation!r}")
    return -(zq[:, -1] + ((scores @ Zc.transpose(0, 2, 1))[:, 0] @ P[-1][-1]) / n)


def mc_transformer_loss(rng, Sigma, n, A_list, total, task="inverse", B_list=None):
    """Mean and s.e. of the squared error ``(TF_L - y_q)^2`` of the transformer with the sparse layers of
    eq. 8 (``B_list`` None) or GD++ (eq. 11) over ``total`` prompts (:func:`predict_gram`)."""
    P, Q = sparse_layers(A_list) if B_list is None else general_layers(A_list, B_list)
    acc = batch_mean()
    for size in chunks(total, CHUNK):
        pr = sample_prompts(rng, Sigma, n, size, task=task)
        acc.add((predict_gram(pr.gram(), P, Q) - pr.target) ** 2)
    return acc.result()


def per_prompt_gradients(ctx, Sigma, n, weights: dict, parametrisation: str, total: int,
                         stats=None):
    """Mean and s.e. of the per-prompt gradients of ``(TF_L - y_q)^2`` w.r.t. the full weight
    matrices (torch autograd through :class:`LinearTransformer`, float64). The "full" and "gdpp"
    parametrisations go through :meth:`LinearTransformer.predict
    <verify.models.linear_transformer.LinearTransformer.predict>` (the Gram recursion: the same
    function of the tokens and of every weight entry as the token forward pass, values and gradients
    equal to round-off, tests; per prompt 2.5-3 times faster at L = 2, d = 5, n = 20); "sparse" through
    the forward pass (its block recursion is the cheaper one there).

    ``weights``: ``{"A": (L, d, d)}`` (sparse, eq. 8), ``{"A": ..., "B": ...}`` (GD++,
    eq. 11) or ``{"P": (L, d+1, d+1), "Q": ...}`` (every entry, "full"). Returns
    ``{name: MeanEstimate}``: by default of each weight's gradient (L, d, d);
    with ``stats = {name: fn}``, of ``fn(grads)`` per prompt (``grads``: weight name -> array
    (B, L, d, d); ``fn`` linear, e.g. a projection, so its mean is ``fn`` of the mean gradient).
    """
    import torch
    from torch.func import functional_call, grad, vmap

    from verify.models.linear_transformer import LinearTransformer, sample_tokens_torch

    first = weights["A"] if "A" in weights else weights["P"]        # "full": P, Q (L, d+1, d+1)
    L, d = first.shape[0], first.shape[1] - (0 if "A" in weights else 1)
    model = LinearTransformer(d, L, parametrisation)
    params = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in weights.items()}
    if parametrisation == "sparse":
        def loss_one(p, Z, y):
            return (-functional_call(model, p, (Z[None],))[0, d, -1] - y) ** 2
    else:
        predictor = _Predictor(model)

        def loss_one(p, Z, y):
            pred = functional_call(predictor, {f"model.{k}": v for k, v in p.items()}, (Z[None],))[0]
            return (pred - y) ** 2

    per_grad = vmap(grad(loss_one), in_dims=(None, 0, 0))
    gen = ctx.torch_generator()
    chol = torch.as_tensor(np.linalg.cholesky(Sigma), dtype=torch.float64)
    if stats is None:
        stats = {k: (lambda g, k=k: g[k]) for k in weights}
    accs = {k: batch_mean() for k in stats}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is several times faster than two
    try:
        for size in chunks(total, 10_000):
            batch = sample_tokens_torch(None, n, size, generator=gen, task="inverse", chol=chol)
            g = per_grad(params, batch.Z, batch.y_q)
            g = {k: v.detach().numpy() for k, v in g.items()}
            for k, fn in stats.items():
                accs[k].add(fn(g))
    finally:
        torch.set_num_threads(threads)
    return {k: acc.result() for k, acc in accs.items()}


def _Predictor(model):
    """``model`` as a module whose forward is its :meth:`~LinearTransformer.predict` (``TF_L``, shape (B,)),
    for ``torch.func.functional_call``; its parameters are ``model.<name>``."""
    import torch

    class Predictor(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.model = inner

        def forward(self, Z):
            return self.model.predict(Z)

    return Predictor(model)


def full_gradient_z(ctx, Sigma, n: int, a_list, b_list, total: int):
    """Per-prompt gradients w.r.t. every entry of ``P_l, Q_l`` (:func:`per_prompt_gradients`,
    full parametrisation) at the GD++ point ``A_l = a_l Sigma^{-1}``, ``B_l = b_l I`` (eq. 11).

    Returns ``(max |z| off the label-label entries [Q_l]_{d+1,d+1}, their z, their mean, their
    s.e., the s.e. of the A-blocks of Q_l, of the B-blocks of P_l, of [P_l]_{d+1,d+1})``."""
    d = Sigma.shape[0]
    Si, I = np.linalg.inv(Sigma), np.eye(d)
    P, Q = general_layers(np.stack([al * Si for al in a_list]),
                          np.stack([bl * I for bl in b_list]))
    est = per_prompt_gradients(ctx, Sigma, n, {"P": P, "Q": Q}, "full", total)
    zP, zQ = est["P"].z(0.0), est["Q"].z(0.0)
    label = np.zeros_like(zQ, dtype=bool)
    label[:, d, d] = True
    rest = float(max(np.abs(zP).max(), np.abs(zQ[~label]).max()))
    return (rest, zQ[:, d, d], est["Q"].mean[:, d, d], est["Q"].se[:, d, d], est["Q"].se[:, :d, :d],
            est["P"].se[:, :d, :d], est["P"].se[:, d, d])
