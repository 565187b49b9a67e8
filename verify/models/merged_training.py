"""Online SGD of merged key-query linear attention and of the cubic-feature MLP against the
exact gradient flow (Zhang, Singh, Latham, Saxe 2025, §3, eqs. 6-8, 34, App. D.1).

:func:`reference_predictions` evaluates eq. M and the general App.-D.1 expression in numpy;
:func:`train_attention_and_mlp` trains the layer and the MLP on the same batches from the
eq.-34 draw of the exact flow; :func:`quadratic_part`, :func:`window_stats` and
:func:`final_statistics` measure how far the window-averaged effective matrix sits above
``L*`` against its own SGD noise.
"""

from __future__ import annotations

import numpy as np

import theory
from verify.models.linear_attention_training import downsample
from verify.stats import evaluate as _cf

__all__ = ["reference_predictions", "merged_forward_outputs", "quadratic_part", "window_stats",
           "train_attention_and_mlp", "final_statistics", "zero_block_norms", "training_figures"]


def reference_predictions(X: np.ndarray, w: np.ndarray, v, U, v_vec, u_vec, N: int,
                           query_in_xx: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """eq. M and the general D.1 expression, in numpy from the token matrices.

    Returns ``(beta^T M x_q, r)`` where ``r`` (App. D.1, with eq. 28) is
    ``sum_i [v_i^T (Lhat + x_q x_q^T / N) U_i + v_i beta^T U_i + (v_i^T beta) u_i^T
    + v_i (w^T Lhat w) u_i^T] x_q``. ``query_in_xx=False`` drops the query's
    ``x_q x_q^T / N`` term (a negative control: ``X X^T`` does contain the query column).
    """
    D = X.shape[1] - 1
    x, y, x_q = X[:, :D, :N], X[:, D, :N], X[:, :D, N]
    beta = np.einsum("bdn,bn->bd", x, y) / N
    Lhat = np.einsum("bdn,ben->bde", x, x) / N
    M = np.einsum("h,hij->ij", v, U)
    eq_m = np.einsum("bi,ij,bj->b", beta, M, x_q)
    K = Lhat + (np.einsum("bd,be->bde", x_q, x_q) / N if query_in_xx else 0.0)
    t1 = np.einsum("hd,bde,hef,bf->b", v_vec, K, U, x_q)
    t2 = np.einsum("h,bd,hde,be->b", v, beta, U, x_q)
    t3 = np.einsum("hd,bd,he,be->b", v_vec, beta, u_vec, x_q)
    wLw = np.einsum("bd,bde,be->b", w, Lhat, w)
    t4 = np.einsum("h,b,he,be->b", v, wLw, u_vec, x_q)
    return eq_m, t1 + t2 + t3 + t4


def quadratic_part(Lam, N, delta) -> float:
    """``q(delta) = tr(delta Lambda delta^T E[Lhat^2])``, the quadratic part of L(M), from
    the closed form: ``q(d) = (L(d) + L(-d)) / 2 - L(0)``. For the minimiser ``M*``,
    ``L(M* + d) - L* = q(d)`` exactly."""
    L = theory.get("linear_attention.merged.loss")
    Z = np.zeros_like(delta)
    return float(0.5 * (L(Lambda=Lam, N=N, M=delta) + L(Lambda=Lam, N=N, M=-delta))
                 - L(Lambda=Lam, N=N, M=Z))


def window_stats(Lam, N, Ms: np.ndarray, n_blocks: int):
    """Window average of the effective matrix and its noise scale (batch means).

    Returns ``(M_bar, e_noise)`` with ``e_noise = E q(M_bar - E M_bar)`` estimated from the
    spread of ``n_blocks`` consecutive block means: ``sum_b q(m_b - M_bar) / (n_b (n_b - 1))``.
    """
    K = (len(Ms) // n_blocks) * n_blocks
    blocks = Ms[len(Ms) - K:].reshape(n_blocks, K // n_blocks, *Ms.shape[1:]).mean(1)
    M_bar = blocks.mean(0)
    e_noise = sum(quadratic_part(Lam, N, b - M_bar) for b in blocks) / (n_blocks * (n_blocks - 1))
    return M_bar, e_noise




def merged_forward_outputs(Lam, N: int, H: int, B: int, gen) -> dict:
    """The real layer's forward on ``B`` sequences (eq. 1) of
    :func:`verify.models.linear_attention.sample_tokens`, every weight ``N(0, 1)`` from ``gen``:
    with the vector blocks ``v_i = u_i = 0``, the full forward's bottom-right entry,
    :meth:`predict`, the cubic-feature MLP (column- and row-major ``vec``), the layer at
    ``rho = N + 1`` and :meth:`effective_matrix`; then with the random vector blocks restored,
    the full forward and :meth:`predict`. Also the numpy references
    (:func:`reference_predictions`): eq. M and the App.-D.1 expression (with and without the
    query's ``x_q x_q^T / N``), and the token matrices ``X``, task vectors ``w`` and weights."""
    import torch

    from verify.models.linear_attention import CubicFeatureMLP, MergedLinearAttention, sample_tokens

    D = Lam.shape[0]
    batch = sample_tokens(Lam, N, B, generator=gen)
    X, w = batch.X, batch.w
    Xn, wn = X.numpy(), w.numpy()

    att = MergedLinearAttention(D, H, N)
    with torch.no_grad():
        att.WV.copy_(torch.randn(att.WV.shape, generator=gen, dtype=att.WV.dtype))
        att.WKQ.copy_(torch.randn(att.WKQ.shape, generator=gen, dtype=att.WKQ.dtype))
    v_vec = att.value_vectors().detach().numpy().copy()
    u_vec = att.kq_vectors().detach().numpy().copy()
    att.set_vector_blocks_(np.zeros((H, D)), np.zeros((H, D)))
    v = att.value_scalars().detach().numpy().copy()
    U = att.kq_blocks().detach().numpy().copy()
    zero = np.zeros((H, D))

    with torch.no_grad():
        full = att(X)[:, D, N].numpy()
        pred = att.predict(X).numpy()
        mlp = CubicFeatureMLP(D, H).load_(v, U).predict(X).numpy()
        mlp_c = CubicFeatureMLP(D, H, order="C").load_(v, U).predict(X).numpy()
        rho1 = MergedLinearAttention(D, H, N, rho=N + 1)
        rho1.WV.copy_(att.WV)
        rho1.WKQ.copy_(att.WKQ)
        rho1_pred = rho1(X)[:, D, N].numpy()
        M_t = att.effective_matrix().numpy()
    eq_m, _ = reference_predictions(Xn, wn, v, U, zero, zero, N)

    att.set_vector_blocks_(v_vec, u_vec)
    with torch.no_grad():
        full_g = att(X)[:, D, N].numpy()
        pred_g = att.predict(X).numpy()
    _, r9 = reference_predictions(Xn, wn, v, U, v_vec, u_vec, N)
    _, r9_noq = reference_predictions(Xn, wn, v, U, v_vec, u_vec, N, query_in_xx=False)
    return {"X": Xn, "w": wn, "v": v, "U": U, "full": full, "predict": pred, "MLP": mlp,
            "MLP row-major": mlp_c, "rho = N + 1": rho1_pred, "effective_matrix": M_t, "eq. M": eq_m,
            "full (vector blocks)": full_g, "predict (vector blocks)": pred_g, "D.1": r9,
            "D.1 without query": r9_noq}


def train_attention_and_mlp(ctx, Lam, N: int, H: int, v0, U0, *, w_init: float, eta: float, steps: int,
                            batch: int):
    """Online SGD of :class:`~verify.models.linear_attention.MergedLinearAttention` from the
    eq.-34 draw ``(v0, U0)`` (``*`` blocks of scale ``w_init``) and of the cubic-feature MLP
    (eq. 6) from the same ``(v0, U0)``, side by side on the same batches (drawn once: what a second
    run from the generator's state after the layer's initialisation would draw). Returns
    ``(layer, run, mlp run)``; each run's ``seconds`` is that of both."""
    from verify.models.linear_attention import CubicFeatureMLP, MergedLinearAttention, train_online_sgd

    D = Lam.shape[0]
    device = ctx.device
    gen = ctx.torch_generator(device)
    att = MergedLinearAttention(D, H, N, device=device).init_(gen, w_init).load_(v0, U0)
    mlp = CubicFeatureMLP(D, H, device=device).load_(v0, U0)
    run_a, run_m = train_online_sgd([att, mlp], Lam, N, eta=eta, steps=steps, batch=batch, generator=gen,
                                    device=device, iterate=ctx.iterate)
    return att, run_a, run_m


def final_statistics(Lam, N: int, run, window: int, n_blocks: int, L_star: float, M_inf) -> dict:
    """The loss excess ``L(M_bar) - L*`` of the effective matrix averaged over the last
    ``window`` logged steps, its noise scale ``e_noise`` (:func:`window_stats`), their ratio,
    the same ratio against the ``N -> infinity`` limit ``M_inf`` (a control), and the mean and
    spread of the single iterates' excess."""
    Ms = run.M_log[-window:]
    M_bar, e_noise = window_stats(Lam, N, Ms, n_blocks)
    excess = float(_cf("linear_attention.merged.loss", Lambda=Lam, N=N, M=M_bar)) - L_star
    last = run.loss[-window:] - L_star
    return dict(M_bar=M_bar, e_noise=e_noise, excess=excess,
                ratio=excess / e_noise,
                ratio_limit=quadratic_part(Lam, N, M_bar - M_inf) / e_noise,
                iterate_excess_mean=float(last.mean()),
                iterate_excess_std=float(last.std(ddof=1)))


def zero_block_norms(att, run) -> dict:
    """The blocks that eq. M needs at zero (``W^V[D, :D]``, ``W^KQ[D, :D]``) at the end and at
    most over the run, and the norms of the value scalars and key-query blocks."""
    w2 = float(np.linalg.norm(att.value_scalars().detach().cpu().numpy()))
    W1 = float(np.linalg.norm(att.kq_blocks().detach().cpu().numpy()))
    return {"||v_i|| (W^V[D,:D])": float(run.zero_v[-1]),
            "||u_i|| (W^KQ[D,:D])": float(run.zero_u[-1]),
            "max ||v_i|| over run": float(run.zero_v.max()),
            "max ||u_i|| over run": float(run.zero_u.max()),
            "||w2|| = ||(v_i)||": w2, "||W1|| = ||(U_i)||": W1}


def training_figures(title: str, run_a, run_m, flow, L_star: float, finals: dict, M_star) -> dict:
    """The loss curves (attention, MLP, exact flow, ``L*``) and the learned effective matrices
    next to ``M*`` (eq. 11)."""
    return {
        "loss": {
            "kind": "lines",
            "title": title,
            "xlabel": "t/τ", "ylabel": "population loss L(M)",
            "yscale": "log",
            "series": [
                {"label": "torch attention", **dict(zip("xy", downsample(run_a.t, run_a.loss)))},
                {"label": "torch MLP on z", "style": "--",
                 **dict(zip("xy", downsample(run_m.t, run_m.loss)))},
                {"label": "exact gradient flow", "style": ":",
                 **dict(zip("xy", downsample(flow.t, flow.loss)))},
                {"label": "L* (global minimum)", "style": "--",
                 "x": [0.0, float(run_a.t[-1])], "y": [L_star, L_star]},
            ],
        },
        "M": {
            "kind": "heatmaps",
            "title": "Learned effective matrix (window average) vs M* (eq. 11)",
            "panels": [{"label": "attention: sum_i v_i U_i", "matrix": finals["attention"]["M_bar"].tolist()},
                       {"label": "MLP: vec^-1(W1^T w2)", "matrix": finals["MLP"]["M_bar"].tolist()},
                       {"label": "M* (eq. 11)", "matrix": M_star.tolist()}],
        },
    }
