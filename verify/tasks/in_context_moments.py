"""Monte Carlo of the in-context moments of the regression task (Zhang, Singh, Latham, Saxe
2025, App. C.1, eqs. 27-31, 43-44): one row per sequence holding ``Lhat``, ``Lhat^2``,
``beta beta^T``, ``y_q z``, ``z z^T`` and ``y_q^2`` side by side, one row per context token for
``x x^T A x x^T``, and the relative error of ``E[z z^T]`` along the way.
"""

from __future__ import annotations

import numpy as np

from verify.stats import MeanEstimate, batch_mean, rel_frobenius
from verify.stats import evaluate as _cf
from verify.tasks.feature_least_squares import schedule
from verify.tasks.in_context_regression import CHUNK, cubic_feature, sample_task

__all__ = ["MOMENT_KEYS", "MARKS", "probe_matrix", "moment_predictions", "sample_moments", "moment_figures"]

#: The per-sequence moments, in the order of the row (their closed forms' shapes give the layout).
MOMENT_KEYS = ("lambda_hat", "lambda_hat_sq", "beta_beta", "yq_z", "zz", "yq_sq")
#: Sample counts at which the error of E[z z^T] is recorded.
MARKS = [10**3, 3 * 10**3, 10**4, 3 * 10**4, 10**5, 3 * 10**5, 10**6, 3 * 10**6, 10**7]


def probe_matrix(rng, Lam) -> np.ndarray:
    """The matrix ``A`` of ``E[x x^T A x x^T]``: Gaussian, plus an antisymmetric part coupling
    ``Lambda``'s two leading eigen-directions with the sign of ``A``'s own."""
    D = Lam.shape[0]
    A_rand = rng.standard_normal((D, D))
    # the 'A taken symmetric' control tests the antisymmetric part of A through Lambda K Lambda; a
    # Gaussian A alone can make it small (expected z 7.5 at one of 200 seeds), so A gets an extra
    # antisymmetric part coupling Lambda's two leading eigen-directions, with the sign of A's own
    # (no cancellation): the expected z is then >= 137 over the same 200 seeds
    _, Q = np.linalg.eigh(Lam)
    Q = Q[:, ::-1]
    Aq = Q.T @ A_rand @ Q
    K0 = np.zeros((D, D))
    K0[0, 1], K0[1, 0] = 1.0, -1.0
    A_rand = A_rand + (1.0 if Aq[0, 1] >= Aq[1, 0] else -1.0) * (Q @ K0 @ Q.T)
    return A_rand


def moment_predictions(Lam, N: int, A_rand) -> dict:
    """The closed forms of the moments (eqs. 27-31, 43-44) by name, ``E[x x^T A x x^T]`` at
    ``A = A_rand`` as ``"fourth_moment"``."""
    return {
        "lambda_hat": _cf("linear_attention.data.lambda_hat_mean", Lambda=Lam, N=N),
        "lambda_hat_sq": _cf("linear_attention.data.lambda_hat_sq", Lambda=Lam, N=N),
        "beta_beta": _cf("linear_attention.data.beta_beta", Lambda=Lam, N=N),
        "yq_z": _cf("linear_attention.data.yq_z", Lambda=Lam),
        "zz": _cf("linear_attention.data.zz", Lambda=Lam, N=N),
        "yq_sq": np.array([_cf("linear_attention.data.yq_sq", Lambda=Lam)]),
        "fourth_moment": _cf("linear_attention.data.fourth_moment", Lambda=Lam, A=A_rand),
    }


def _upper_index(n: int) -> np.ndarray:
    """For each entry ``(i, j)`` of an ``n x n`` matrix (row-major), the position of ``(min, max)`` among the
    upper-triangle entries in :func:`numpy.triu_indices` order."""
    pos = np.zeros((n, n), dtype=int)
    pos[np.triu_indices(n)] = np.arange(n * (n + 1) // 2)
    return np.maximum(pos, pos.T).reshape(-1)


def _upper_products(u: np.ndarray, out: np.ndarray, col: int, scale: np.ndarray | None = None) -> int:
    """Write ``u_i u_j`` (``(s u_i) u_j`` with ``scale`` ``s`` (B,)) for ``i <= j`` (:func:`numpy.triu_indices`
    order) of the rows of ``u`` (B, n) into the columns of ``out`` from ``col`` on; return the column after them."""
    n = u.shape[1]
    left = u if scale is None else scale[:, None] * u
    for i in range(n):
        np.multiply(left[:, i:i + 1], u[:, i:], out=out[:, col:col + n - i])
        col += n - i
    return col


def sample_moments(rng, Lam, N: int, A_rand, total: int, pred: dict, iterate=None):
    """Sample means of the moments of :data:`MOMENT_KEYS` over ``total`` sequences and of
    ``x x^T A x x^T`` over their context tokens, shaped like the closed forms ``pred``.

    Returns ``(per-sequence estimate, per-token estimate, mean, se, n at the marks, relative
    Frobenius error of E[z z^T] there)``, ``mean`` and ``se`` dicts by moment (with
    ``"fourth_moment"``)."""
    D = Lam.shape[0]
    sizes = {k: int(np.size(pred[k])) for k in MOMENT_KEYS}
    offsets = np.cumsum([0, *(sizes[k] for k in MOMENT_KEYS)])
    # beta beta^T and z z^T are symmetric entry by entry (u_i u_j and u_j u_i are the same float), so the row
    # holds their upper triangles (i <= j) only, and ``full`` maps the row back to the closed forms' layout:
    # the same sums, entry for entry, for 2/3 of the columns at D = 3
    n_b, n_z = D * (D + 1) // 2, D * D * (D * D + 1) // 2
    full = np.concatenate([np.arange(offsets[2]),
                           offsets[2] + _upper_index(D), offsets[2] + n_b + np.arange(sizes["yq_z"]),
                           offsets[2] + n_b + sizes["yq_z"] + _upper_index(D * D),
                           [offsets[2] + n_b + sizes["yq_z"] + n_z]])

    seq = batch_mean()  # one row per sequence: every per-sequence moment side by side
    tok = batch_mean()  # one row per context token: x x^T A x x^T
    curve_n, curve_err = [], []
    sizes_k = schedule(total, CHUNK, MARKS)
    for k in (iterate(sizes_k, "moments") if iterate else sizes_k):
        task = sample_task(rng, Lam, N, int(k))
        B = task.batch
        Lh, b = task.lambda_hat, task.beta
        z = cubic_feature(b, task.x_q)                  # task.z, beta computed once
        row = np.empty((B, full.max() + 1))
        row[:, :offsets[1]] = Lh.reshape(B, -1)
        row[:, offsets[1]:offsets[2]] = (Lh @ Lh).reshape(B, -1)
        col = _upper_products(b, row, offsets[2])
        np.multiply(task.y_q[:, None], z, out=row[:, col:col + z.shape[1]])
        col = _upper_products(z, row, col + z.shape[1])
        row[:, col] = task.y_q ** 2
        seq.add(row)
        x = task.x.reshape(-1, D)
        quad = np.einsum("ti,ij,tj->t", x, A_rand, x)
        # x x^T A x x^T is symmetric: its upper triangle (quad x_i) x_j, i <= j, stands for (i, j) and (j, i)
        # (the lower entries were (quad x_j) x_i: the same up to the last bit)
        tok_row = np.empty((x.shape[0], D * (D + 1) // 2))
        _upper_products(x, tok_row, 0, scale=quad)
        tok.add(tok_row)
        if seq.n in MARKS or seq.n == total:
            est = seq.result()
            zz_hat = est.mean[full][offsets[4]:offsets[5]].reshape(D * D, D * D)
            curve_n.append(seq.n)
            curve_err.append(rel_frobenius(zz_hat, pred["zz"]))

    est_seq, est_tok = seq.result(), tok.result()
    est_seq = MeanEstimate(est_seq.mean[full], est_seq.se[full], est_seq.n)
    mean, se = {}, {}
    for i, key in enumerate(MOMENT_KEYS):
        sl = slice(offsets[i], offsets[i + 1])
        mean[key] = est_seq.mean[sl].reshape(np.shape(pred[key]))
        se[key] = est_seq.se[sl].reshape(np.shape(pred[key]))
    sym = _upper_index(D)
    est_tok = MeanEstimate(est_tok.mean[sym], est_tok.se[sym], est_tok.n)
    mean["fourth_moment"] = est_tok.mean.reshape(D, D)
    se["fourth_moment"] = est_tok.se.reshape(D, D)
    return est_seq, est_tok, mean, se, curve_n, curve_err


def moment_figures(D: int, N: int, eigenvalues, est_seq, mean: dict, se: dict, pred: dict, swapped,
                   curve_n, curve_err) -> dict:
    """The error of the Monte Carlo ``E[z z^T]`` against the sample count with its ``n^{-1/2}``
    guide, and the matrix next to eq. 44 and the swapped Kronecker order."""
    zz_norm = np.linalg.norm(pred["zz"])
    guide_c = np.sqrt(np.sum(se["zz"] ** 2) * est_seq.n) / zz_norm  # E||err||_F ~ c / sqrt(n)
    figure = {
        "kind": "lines",
        "title": f"Monte Carlo error of E[z z^T] (D={D}, N={N}, eigenvalues {eigenvalues})",
        "xlabel": "sequences n",
        "ylabel": "relative Frobenius error",
        "xscale": "log", "yscale": "log",
        "series": [
            {"label": "MC estimate vs Lambda (x) E[Lhat^2]", "x": curve_n, "y": curve_err,
             "style": "o"},
            {"label": "sqrt(sum of variances / n) / ||E[z z^T]||  (n^-1/2 guide)",
             "x": curve_n, "y": [float(guide_c / np.sqrt(n)) for n in curve_n],
             "style": "--"},
        ],
    }
    return {
        "zz_error_vs_samples": figure,
        "zz_matrices": {
            "kind": "heatmaps",
            "title": f"E[z z^T] ({D * D} x {D * D}): Monte Carlo, eq. 44 and the swapped order",
            "panels": [
                {"label": f"Monte Carlo (n = {est_seq.n})", "matrix": mean["zz"].tolist()},
                {"label": "Lambda (x) E[Lhat^2] (eq. 44)", "matrix": pred["zz"].tolist()},
                {"label": "E[Lhat^2] (x) Lambda (control)", "matrix": swapped.tolist()},
            ],
        },
    }
