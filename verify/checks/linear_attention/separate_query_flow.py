"""The query's flow of ATTN_S against autograd of the real layer (Zhang, Singh, Latham, Saxe 2025, App. F.2,
eq. 83c).

Contains
--------
``linear_attention.separate.mc_query_flow``
    Autograd gradients of the real rank-R layer, averaged over sampled sequences, give tau dq_ir/dt = v_i G^T
    k_ir (``linear_attention.separate.query_flow``), not eq. 83c's v_i G k_ir
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.settings import Setting
from verify.stats import batch_mean, z_threshold

FLOW = "linear_attention.separate.query_flow"


@check("linear_attention.separate.mc_query_flow", covers=[FLOW], decides=[FLOW], method="torch", needs=("torch",),
       title="Eq. 83c: the real ATTN_S layer's query gradient is v_i G^T k_ir (derived), not v_i G k_ir (printed)",
       settings=[Setting("D", "int", quick=3, full=4, low=2, high=8, doc="token dimension D (>= 2)"),
                 Setting("H", "int", quick=2, full=3, low=1, high=8, doc="heads H"),
                 Setting("R", "int", quick=2, full=2, low=1, high=8, doc="rank R"),
                 Setting("N", "int", quick=8, full=16, low=1, high=200, doc="context length N"),
                 Setting("samples", "int", quick=200_000, full=2_000_000, low=2000, high=10**8,
                         doc="sampled sequences"),
                 Setting("batch", "int", quick=200, full=1000, low=1, high=10**5,
                         doc="sequences per autograd gradient (the standard errors come from their spread)")])
def mc_query_flow(ctx):
    """At a random point (``v_i ~ N(0, 1)``, ``k_ir, q_ir`` entries ``N(0, 1/D)``; vector blocks 0) the
    autograd gradients of the real layer's mean squared error with respect to every query ``q_ir``,
    averaged over sampled sequences, estimate ``-1/2 dL/dq_ir`` (eq. 5's flow). Predicted:
    ``linear_attention.separate.query_flow`` at each ``(v_i, k_ir)`` with ``M = sum v k q^T``; every
    entry's z-score within the Bonferroni threshold.

    Control (deciding the erratum): eq. 83c as printed, ``v_i G k_ir``; at a point where ``M`` is not
    symmetric its expected |z| is the two forms' difference over the standard error."""
    import torch

    import theory
    from verify.models.linear_attention import sample_tokens
    from verify.models.linear_attention_separate import SeparateLinearAttention
    from verify.tasks.in_context_regression import random_covariance

    D, H, R, N = (ctx.setting(k) for k in ("D", "H", "R", "N"))
    samples, batch = ctx.setting("samples"), ctx.setting("batch")
    if samples < 2 * batch:
        raise ValueError(f"samples: need at least two batches of {batch}, got {samples}")
    Lam = random_covariance(ctx.rng, np.linspace(1.0, 0.3, D))
    v = ctx.rng.standard_normal(H)
    k = ctx.rng.standard_normal((H, R, D)) / np.sqrt(D)
    q = ctx.rng.standard_normal((H, R, D)) / np.sqrt(D)
    M = np.einsum("h,hrd,hre->de", v, k, q)
    gen = ctx.torch_generator("cpu")
    layer = SeparateLinearAttention(D, H, R, N).init_(gen, 1.0).load_(v, k, q)
    chol = torch.as_tensor(np.linalg.cholesky(Lam), dtype=torch.float64)
    est = batch_mean()
    for _ in range(samples // batch):
        tb = sample_tokens(None, N, batch, generator=gen, chol=chol)
        layer.zero_grad(set_to_none=True)
        torch.mean((layer.predict(tb.X) - tb.y_q) ** 2).backward()
        est.add((-0.5 * layer.WQ.grad[:, :, :D]).reshape(1, -1).numpy())
    e = est.result()

    record = theory.get(FLOW)

    def flows(printed: bool):
        return np.stack([[np.asarray(record(Lambda=Lam, N=N, M=M, v_i=float(v[h]), k_vec=k[h, r], printed=printed),
                                     float) for r in range(R)] for h in range(H)]).ravel()

    derived, printed = flows(False), flows(True)
    z = (e.mean - derived) / e.se
    z_printed = (e.mean - printed) / e.se
    z_crit = z_threshold(z.size)
    worst = float(np.max(np.abs(z)))
    return Outcome(
        measured={"-1/2 dL/dq (MC)": e.mean, "s.e.": e.se},
        predicted={"v_i G^T k_ir (derived)": derived, "v_i G k_ir (eq. 83c as printed)": printed},
        discrepancy=worst, tolerance=z_crit,
        criterion=(f"max |z| over the {z.size} query entries <= {z_crit:.2f} (Bonferroni, false alarm 1e-6); "
                   f"{samples} sequences in autograd batches of {batch}; D = {D}, H = {H}, R = {R}, N = {N}"),
        controls=[Control("eq. 83c as printed, v_i G k_ir: max |z|", float(np.max(np.abs(z_printed))), z_crit,
                          expected=float(np.max(np.abs((derived - printed) / e.se))))],
        details={"||M - M^T|| / ||M||": float(np.linalg.norm(M - M.T) / np.linalg.norm(M))},
    )

