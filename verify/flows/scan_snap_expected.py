"""The expected batch-1 dynamics of the 1-layer transformer of Tian, Wang, Chen, Du 2023 ("Scan and Snap") in
the long-sequence limit, with or without the residual connection of §7.

Each step moves (Y, Z) by the gradient of the cross-entropy averaged over the K classes (the expected update of
batch-1 SGD with uniformly drawn classes: no sampling noise), class n seeing its long-sequence attention
``c_n = softmax(ln P(.|n) + z_{psi(n)})`` (Lemma 2) and the output

* ``LN(c_n)`` (eq. 2; Lemma 1's dynamics, eq. 4 for Z), or
* ``LN(LN(c_n) + e_{psi(n)})`` with the residual connection of §7 (the query token's embedding added to the
  normalised attention output; in the (Y, Z) parameterisation with orthonormal embeddings ``u_{x_T} = e_m``).

The gradients are the chain rule through these maps, in numpy (float64): the cross-entropy's ``(p_n -
e_label)/K`` through the decoder, each ``LN(h) = h/|h|`` through ``(I - LN(h) LN(h)^T)/|h|`` and the softmax
through ``diag(c) - c c^T``, summed into the query rows. ``tests/test_flows_scan_snap_expected.py`` compares them
with torch autograd of the same loss (both variants).
"""

from __future__ import annotations

import numpy as np

__all__ = ["expected_run"]


def expected_run(classes, eta_Y: float, eta_Z: float, steps: int, *, residual: bool = False, record_every: int = 1,
                 Z0=None):
    """Gradient descent on the class-averaged cross-entropy from Y = 0, Z = ``Z0`` (default 0).

    Returns a dict: ``steps`` (recorded step counts, from 0), ``z`` (the query rows of Z at those steps,
    (R, n_queries, M)), ``queries`` (their ids), ``Y``, ``Z`` (final, numpy)."""
    M, K = classes.M, classes.K
    if steps < 0 or record_every < 1:
        raise ValueError(f"steps: need steps >= 0 and record_every >= 1, got {steps}, {record_every}")
    with np.errstate(divide="ignore"):
        logP = np.where(classes.P > 0, np.log(np.where(classes.P > 0, classes.P, 1.0)), -np.inf)   # (K, M)
    psi = np.asarray(classes.psi)
    label = np.asarray(classes.label)
    rows = np.arange(K)
    Y = np.zeros((M, M))
    Z = np.zeros((M, M)) if Z0 is None else np.array(Z0, dtype=np.float64)
    queries = np.unique(psi)
    rec_steps, rec_z = [0], [Z[queries].copy()]
    for s in range(steps):
        x = logP + Z[psi]                                          # (K, M)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        c = e / e.sum(axis=1, keepdims=True)                       # zero off the support
        cn = np.linalg.norm(c, axis=1, keepdims=True)
        f = c / cn
        out = f
        if residual:
            h = f.copy()
            h[rows, psi] += 1.0
            hn = np.linalg.norm(h, axis=1, keepdims=True)
            out = h / hn
        logits = out @ Y
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[rows, label] -= 1.0
        g_logits = p / K                                           # d loss / d logits (mean over the classes)
        gY = out.T @ g_logits
        g = g_logits @ Y.T                                         # d loss / d out
        if residual:
            g = (g - out * np.sum(out * g, axis=1, keepdims=True)) / hn
        g = (g - f * np.sum(f * g, axis=1, keepdims=True)) / cn    # d loss / d c
        gx = c * (g - np.sum(c * g, axis=1, keepdims=True))        # d loss / d x = d loss / d Z[psi(n)]
        gZ = np.zeros((M, M))
        np.add.at(gZ, psi, gx)
        Y -= eta_Y * gY
        Z -= eta_Z * gZ
        if (s + 1) % record_every == 0:
            rec_steps.append(s + 1)
            rec_z.append(Z[queries].copy())
    return {"steps": np.array(rec_steps), "z": np.array(rec_z), "queries": queries, "Y": Y.copy(), "Z": Z.copy()}
