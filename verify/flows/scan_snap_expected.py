"""The expected batch-1 dynamics of the 1-layer transformer of Tian, Wang, Chen, Du 2023 ("Scan and Snap") in
the long-sequence limit, with or without the residual connection of §7.

Each step moves (Y, Z) by the gradient of the cross-entropy averaged over the K classes (the expected update of
batch-1 SGD with uniformly drawn classes: no sampling noise), class n seeing its long-sequence attention
``c_n = softmax(ln P(.|n) + z_{psi(n)})`` (Lemma 2) and the output

* ``LN(c_n)`` (eq. 2; Lemma 1's dynamics, eq. 4 for Z), or
* ``LN(LN(c_n) + e_{psi(n)})`` with the residual connection of §7 (the query token's embedding added to the
  normalised attention output; in the (Y, Z) parameterisation with orthonormal embeddings ``u_{x_T} = e_m``).

The gradients come from torch autograd (float64), so the residual variant needs no hand derivation;
without it they are Lemma 1's (the test ``tests/test_scan_snap_rest.py`` compares them with ``population_run``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["expected_run"]


def expected_run(classes, eta_Y: float, eta_Z: float, steps: int, *, residual: bool = False, record_every: int = 1,
                 Z0=None):
    """Gradient descent on the class-averaged cross-entropy from Y = 0, Z = ``Z0`` (default 0).

    Returns a dict: ``steps`` (recorded step counts, from 0), ``z`` (the query rows of Z at those steps,
    (R, n_queries, M)), ``queries`` (their ids), ``Y``, ``Z`` (final, numpy)."""
    import torch

    from verify.models.linear_attention import cpu_threads

    with cpu_threads(1):   # tiny matrices: one thread (OpenMP synchronisation costs 30x on a busy 2-core machine)
        return _expected_run(torch, classes, eta_Y, eta_Z, steps, residual, record_every, Z0)


def _expected_run(torch, classes, eta_Y, eta_Z, steps, residual, record_every, Z0):
    M = classes.M
    if steps < 0 or record_every < 1:
        raise ValueError(f"steps: need steps >= 0 and record_every >= 1, got {steps}, {record_every}")
    support = torch.as_tensor(classes.P > 0)
    logP = torch.where(support, torch.log(torch.as_tensor(np.where(classes.P > 0, classes.P, 1.0))),
                       torch.tensor(-torch.inf, dtype=torch.float64))
    psi = torch.as_tensor(classes.psi)
    label = torch.as_tensor(classes.label)
    Y = torch.zeros(M, M, dtype=torch.float64, requires_grad=True)
    Z = torch.as_tensor(np.zeros((M, M)) if Z0 is None else np.asarray(Z0, dtype=np.float64)).clone()
    Z.requires_grad_(True)
    e_q = torch.nn.functional.one_hot(psi, M).to(torch.float64)
    queries = np.unique(classes.psi)
    rec_steps, rec_z = [0], [Z.detach().numpy()[queries].copy()]
    for s in range(steps):
        c = torch.softmax(logP + Z[psi], dim=1)                    # (K, M), zero off the support
        out = c / c.norm(dim=1, keepdim=True)
        if residual:
            out = out + e_q
            out = out / out.norm(dim=1, keepdim=True)
        loss = torch.nn.functional.cross_entropy(out @ Y, label)   # mean over the K classes
        gY, gZ = torch.autograd.grad(loss, (Y, Z))
        with torch.no_grad():
            Y -= eta_Y * gY
            Z -= eta_Z * gZ
        if (s + 1) % record_every == 0:
            rec_steps.append(s + 1)
            rec_z.append(Z.detach().numpy()[queries].copy())
    return {"steps": np.array(rec_steps), "z": np.array(rec_z), "queries": queries,
            "Y": Y.detach().numpy().copy(), "Z": Z.detach().numpy().copy()}
