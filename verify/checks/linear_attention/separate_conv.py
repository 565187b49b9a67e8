"""ATTN_S as a convolutional network on the cubic feature, and what H heads can express (Zhang, Singh,
Latham, Saxe 2025, §4.1, eq. 13).

Contains
--------
``linear_attention.separate.torch_conv_form``
    The real layer equals sum_i v_i q_i^T K_i z with K_i = I_D (x) k_i^T, a 1-d convolution of z = vec(beta
    x_q^T) with kernel k_i and stride D (eq. 13); with H = D heads it computes beta^T M x_q for any M, with
    H = D - 1 it misses the best rank-(D-1) map by sigma_D (Eckart-Young)
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.settings import Setting
from verify.stats import rel_max

#: Round-off tolerance of the exact identities (relative to the largest |yhat|).
ROUNDOFF_RTOL = 1e-12


@check("linear_attention.separate.torch_conv_form", covers=["linear_attention.merged.loss"], method="torch",
       needs=("torch",),
       title="Eq. 13: ATTN_S = sum_i v_i q_i^T (I_D (x) k_i^T) z, a convolution of z with stride D; H >= D heads "
             "express every beta^T M x_q, H = D - 1 do not",
       settings=[Setting("D", "int", quick=4, full=8, low=2, high=32, doc="token dimension D"),
                 Setting("N", "int", quick=7, full=31, low=1, high=500, doc="context length N"),
                 Setting("samples", "int", quick=512, full=4096, low=16, high=10**5,
                         doc="sampled sequences the identities are evaluated on")])
def torch_conv_form(ctx):
    """Eq. 13 and the §4.1 expressivity claim, on the real layer
    (:class:`verify.models.linear_attention_separate.SeparateLinearAttention`, ``R = 1``, vector blocks 0).

    1. Convolutional form: for random ``v_i, k_i, q_i`` (``H = D``), the layer's prediction equals ``sum_i v_i
       q_i^T K_i z`` computed as a ``torch.nn.functional.conv1d`` of ``z = vec(beta x_q^T)`` (column-major,
       ``x_q (x) beta``, eq. 7) with kernel ``k_i`` and stride ``D``, to round-off.
    2. ``H >= D``: a random full-rank ``M`` is written as ``D`` rank-one heads by its SVD (``v_i = sigma_i``,
       ``k_i, q_i`` the singular vectors); the layer then computes ``beta^T M x_q`` to round-off.
    3. ``H = D - 1``: no layer does (Eckart-Young: the closest sum of ``D - 1`` rank-one terms misses ``M`` by
       ``sigma_D`` in Frobenius norm); the best one's predictions miss ``beta^T M x_q`` by what that residual
       ``sigma_D u_D w_D^T`` predicts, to round-off.

    Controls: ``z`` row-major (``beta (x) x_q``: the convolution then computes ``beta^T M^T x_q``), and the
    ``H = D - 1`` layer against ``beta^T M x_q`` (its miss, the size of ``sigma_D``'s term)."""
    import torch
    import torch.nn.functional as F

    from verify.models.linear_attention import cubic_features, sample_tokens
    from verify.models.linear_attention_separate import SeparateLinearAttention
    from verify.tasks.in_context_regression import random_covariance

    D, N, B = ctx.setting("D"), ctx.setting("N"), ctx.setting("samples")
    Lam = random_covariance(ctx.rng, np.linspace(1.0, 0.2, D))
    gen = ctx.torch_generator("cpu")
    tb = sample_tokens(Lam, N, B, generator=gen)
    X = tb.X
    z = cubic_features(X, "F")                       # (B, D^2), vec(beta x_q^T) column-major
    z_rowmajor = cubic_features(X, "C")
    beta = (X[:, :D, :N] @ X[:, D, :N, None]).squeeze(-1) / N
    x_q = X[:, :D, N]

    def layer(v, k, q):
        H = len(v)
        att = SeparateLinearAttention(D, H, 1, N)
        att.load_(v, k[:, None, :], q[:, None, :])
        with torch.no_grad():
            return att.predict(X).numpy()

    def conv(v, k, q, feats):
        out = F.conv1d(feats[:, None, :], torch.as_tensor(k)[:, None, :], stride=D)   # (B, H, D): k_i^T blocks
        return (out * torch.as_tensor(q)[None]).sum(-1) @ torch.as_tensor(v)

    def bilinear(M):
        return torch.einsum("bd,de,be->b", beta, torch.as_tensor(M), x_q).numpy()

    # 1. the convolutional form
    v = ctx.rng.standard_normal(D)
    k, q = ctx.rng.standard_normal((D, D)), ctx.rng.standard_normal((D, D))
    y_layer = layer(v, k, q)
    scale = float(np.max(np.abs(y_layer)))
    err_conv = float(np.max(np.abs(conv(v, k, q, z).numpy() - y_layer))) / scale
    err_conv_rowmajor = float(np.max(np.abs(conv(v, k, q, z_rowmajor).numpy() - y_layer))) / scale
    M_heads = np.einsum("h,hd,he->de", v, k, q)
    expected_rowmajor = float(np.max(np.abs(bilinear(M_heads.T) - y_layer))) / scale   # it computes M^T
    # 2. H = D expresses any M (SVD heads)
    M = ctx.rng.standard_normal((D, D))
    U_, s, Wt = np.linalg.svd(M)
    target = bilinear(M)
    err_full = rel_max(layer(s, U_.T, Wt), target)
    # 3. H = D - 1: the Eckart-Young best misses by the sigma_D term exactly
    y_best = layer(s[:-1], U_.T[:-1], Wt[:-1])
    residual = bilinear(s[-1] * np.outer(U_[:, -1], Wt[-1]))
    err_best = float(np.max(np.abs(target - y_best - residual))) / float(np.max(np.abs(target)))
    miss_best = rel_max(y_best, target)
    parts = {"conv form": err_conv, "H = D, SVD heads vs beta^T M x_q": err_full,
             "H = D - 1, best heads vs beta^T M x_q - sigma_D term": err_best}
    return Outcome(
        measured={**parts, "sigma (singular values of M)": s},
        predicted={"identities": 0.0},
        discrepancy=max(parts.values()), tolerance=ROUNDOFF_RTOL,
        criterion=(f"max relative difference over {B} sequences <= {ROUNDOFF_RTOL:g} (exact identities, float64 "
                   f"round-off) for: the layer vs sum_i v_i q_i^T conv1d(z, k_i, stride D); the H = D layer with "
                   f"M's SVD heads vs beta^T M x_q; the H = D - 1 layer with the first D - 1 SVD heads vs beta^T M "
                   f"x_q minus the sigma_D term; D = {D}, N = {N}"),
        controls=[Control("z row-major (beta (x) x_q) in the convolution", err_conv_rowmajor, ROUNDOFF_RTOL,
                          expected=expected_rowmajor),
                  Control(f"H = D - 1 heads express M (sigma_D / sigma_1 = {s[-1] / s[0]:.3f})", miss_best,
                          ROUNDOFF_RTOL, expected=rel_max(target - residual, target))],
        details={"Frobenius miss of the best H = D - 1 sum (Eckart-Young)": float(s[-1]),
                 "relative Frobenius miss": float(s[-1] / np.linalg.norm(s))},
    )
