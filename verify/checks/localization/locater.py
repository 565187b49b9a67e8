"""Checks of ``localization.locater`` (see also :mod:`verify.checks.localization.gradient`).

Contains
--------
``localization.locater.grad_autograd``
    LOCATER regulariser and its gradients vs autograd
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.settings import Setting


# =====================================================================================
@check("localization.locater.grad_autograd", aliases=["localization.gradient.locater_autograd"],
       covers=["localization.locater.regulariser", "localization.locater.grad_query",
               "localization.locater.grad_key"],
       decides=["localization.locater.grad_query", "localization.locater.grad_key"],
       method="torch", title="LOCATER regulariser and its gradients vs autograd",
       settings=[Setting("samples", "int", quick=50, full=500, low=1, high=10**6,
                         doc="random (d, W_Q, W_K, kappa) draws")])
def locater_autograd(ctx):
    import torch

    rng = ctx.rng
    draws = ctx.setting("samples")
    R, gq, gk = (theory.get(f"localization.locater.{n}") for n in ("regulariser", "grad_query", "grad_key"))
    err, err_pq, err_pk, gap_pq, gap_pk = [], [], [], [], []
    for _ in range(draws):
        d = int(rng.integers(2, 9))
        Wq, Wk = rng.standard_normal((2, d, d)) / np.sqrt(d) * rng.uniform(0.3, 2.0)
        k1, k2 = rng.uniform(0.1, 3.0, size=2)
        tq, tk = (torch.tensor(w, requires_grad=True) for w in (Wq, Wk))
        W = tq.T @ tk
        val = k1 * torch.trace(W.T @ W) + k2 * (torch.trace(W) - 1) ** 2
        aq, ak = (g.numpy() for g in torch.autograd.grad(val, (tq, tk)))
        kw = dict(W_Q=Wq, W_K=Wk, kappa1=k1, kappa2=k2)
        err.append(abs(R(**kw) - val.item()) / abs(val.item()))
        err.append(np.linalg.norm(gq(**kw) - aq) / np.linalg.norm(aq))
        err.append(np.linalg.norm(gk(**kw) - ak) / np.linalg.norm(ak))
        err_pq.append(np.linalg.norm(gq(printed=True, **kw) - aq) / np.linalg.norm(aq))
        err_pk.append(np.linalg.norm(gk(printed=True, **kw) - ak) / np.linalg.norm(ak))
        # expected: the printed gradients against the registered ones (closed form vs closed form)
        gap_pq.append(np.linalg.norm(gq(printed=True, **kw) - gq(**kw)) / np.linalg.norm(gq(**kw)))
        gap_pk.append(np.linalg.norm(gk(printed=True, **kw) - gk(**kw)) / np.linalg.norm(gk(**kw)))
    tol = 1e-12
    return Outcome(
        measured=float(max(err)), predicted=0.0, discrepancy=float(max(err)), tolerance=tol,
        criterion=(f"max relative error (Frobenius) of R, dR/dW_Q, dR/dW_K vs torch autograd over {draws} random "
                   f"(W_Q, W_K, kappa1, kappa2), d = 2..8, <= {tol:g} (float64 round-off; a wrong term is O(1))"),
        controls=[Control("printed grad_query (mean term [tr-1] tr W_K), median error", float(np.median(err_pq)), tol,
                          expected=float(np.median(gap_pq))),
                  Control("printed grad_key (mean term [tr-1] tr W_Q), median error", float(np.median(err_pk)), tol,
                          expected=float(np.median(gap_pk)))],
        details={"draws": draws, "printed_query_min_max": [float(min(err_pq)), float(max(err_pq))],
                 "printed_key_min_max": [float(min(err_pk)), float(max(err_pk))]},
    )
