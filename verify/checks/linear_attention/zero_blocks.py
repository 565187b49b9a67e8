"""Checks of ``linear_attention.zero_blocks``: the blocks every reduced form sets to zero stay zero
(Zhang, Singh, Latham, Saxe 2025, App. D.1, eqs. 40-41; App. F.1).

Contains
--------
``linear_attention.zero_blocks.mc_gradients``
    Autograd gradients of the real ATTN_M and ATTN_S layers, averaged over sampled sequences, at a
    point with the vector blocks at zero: those blocks' flow is 0 for the paper's prior and the
    derived value for a prior with a mean (control: 0 is rejected there)
``linear_attention.zero_blocks.symbolic_paper_prior``
    The derived flows of the vector blocks are exactly 0 at mu = 0 (eqs. 40-41 as printed)
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.settings import Setting
from verify.stats import batch_mean, t_threshold
from verify.stats import evaluate as _cf

VALUE = "linear_attention.zero_blocks.value_vector_gradient"
KQ = "linear_attention.zero_blocks.kq_vector_gradient"
#: Eigenvalues of Lambda (random eigenvectors per seed).
EIGENVALUES = (0.5, 0.3, 0.2)


def _zero_block_flows(model, Lam, N: int, mu, samples: int, batch: int, generator, separate: bool):
    """Monte Carlo of ``-1/2 dL/dW`` for the vector blocks of ``model`` (and the live blocks of the
    merged model) under ``w ~ N(mu, I)``: the mean of ``batch``-sequence autograd gradients over
    ``samples`` sequences, with standard errors from the spread of the batch gradients."""
    import torch

    from verify.models.linear_attention import sample_tokens

    D = model.D
    chol = torch.as_tensor(np.linalg.cholesky(Lam), dtype=torch.float64)
    mu_t = torch.as_tensor(mu, dtype=torch.float64)
    est = batch_mean()
    for _ in range(samples // batch):
        tb = sample_tokens(None, N, batch, generator=generator, chol=chol)
        X, y_q = tb.X.clone(), tb.y_q
        if np.any(mu):  # w = mu + g: every label gains mu^T x
            X[:, D, :N] += torch.einsum("bdn,d->bn", X[:, :D, :N], mu_t)
            y_q = y_q + X[:, :D, N] @ mu_t
        model.zero_grad(set_to_none=True)
        torch.mean((model.predict(X) - y_q) ** 2).backward()
        with torch.no_grad():
            gV, gK = model.WV.grad[:, D, :D], (model.WK if separate else model.WKQ).grad
            gK = gK[:, :, D] if separate else gK[:, D, :D]
            parts = [-0.5 * gV.reshape(-1), -0.5 * gK.reshape(-1)]
            if not separate:
                parts += [-0.5 * model.WV.grad[:, D, D], -0.5 * model.WKQ.grad[:, :D, :D].reshape(-1)]
            est.add(torch.cat(parts).numpy()[None, :])
    return est.result()


def _predicted(Lam, N: int, mu, v, K, Q=None):
    """The derived flows of the vector blocks, flattened like :func:`_zero_block_flows`: ATTN_M
    (``K`` the U_i) or ATTN_S (``K`` the keys k_ir, ``Q`` the queries q_ir)."""
    if Q is None:
        U = K
    else:
        U = np.einsum("hrd,hre->hde", K, Q)
    M = np.einsum("h,hde->de", v, U)
    value = np.stack([np.asarray(_cf(VALUE, Lambda=Lam, N=N, M=M, U=U[i], mu=mu), float) for i in range(len(v))])
    kq = np.stack([np.asarray(_cf(KQ, Lambda=Lam, N=N, M=M, v_i=float(v[i]), mu=mu), float) for i in range(len(v))])
    if Q is not None:  # kappa_ir moves at q_ir^T (-1/2 dL/du_i)
        kq = np.einsum("hrd,hd->hr", Q, kq)
    return np.concatenate([value.ravel(), kq.ravel()])


@check("linear_attention.zero_blocks.mc_gradients", covers=[VALUE, KQ, "linear_attention.merged.gradient"],
       method="torch", needs=("torch",),
       title="The vector blocks of ATTN_M and ATTN_S stay zero: autograd flow 0 for w ~ N(0, I) "
             "(eqs. 40-41, App. F.1), the derived value for w ~ N(mu, I)",
       settings=[Setting("D", "int", quick=3, full=4, low=1, high=8, doc="token dimension D"),
                 Setting("H", "int", quick=2, full=3, low=1, high=8, doc="heads H"),
                 Setting("R", "int", quick=2, full=2, low=1, high=8, doc="rank R of the ATTN_S keys and queries"),
                 Setting("N", "int", quick=8, full=16, low=1, high=200, doc="context length N"),
                 # quick: the controls' expected max |z| >= 5.6 x the threshold 5.65 at seeds 0-19 (12 x at 2e5)
                 Setting("samples", "int", quick=40_000, full=2_000_000, low=2000, high=10**8,
                         doc="sampled sequences per model and prior"),
                 Setting("batch", "int", quick=200, full=1000, low=1, high=10**5,
                         doc="sequences per autograd gradient (the standard errors come from their spread)"),
                 Setting("mu_norm", "float", quick=1.0, full=1.0, low=1e-3, high=10.0,
                         doc="|mu| of the control prior w ~ N(mu, I) (random direction)")])
def mc_gradients(ctx):
    """At a point with the vector blocks at zero (the merged ``a_i = W^V_i[D, :D]``, ``u_i =
    W^KQ_i[D, :D]``; the separate ``a_i`` and ``kappa_ir = W^K_i[r, D]``) and every other block
    random (``v_i ~ N(0, 1)``, ``U_i``, ``k_ir``, ``q_ir`` entries ``N(0, 1/D)``: a point well past
    the small start, where the flow is fast), the real layers' autograd gradients of the mean
    squared error, averaged over sampled sequences, estimate the population flow ``-1/2 dL/dW``
    (eq. 5).

    Predicted: the vector blocks' flow is ``linear_attention.zero_blocks.value_vector_gradient``
    and ``.kq_vector_gradient`` (ATTN_S: ``q_ir^T`` times it), which is 0 for the paper's prior
    ``w ~ N(0, I)`` (eqs. 40-41) and not for ``w ~ N(mu, I)``; and the live blocks of ATTN_M
    flow as eq. 8, ``tau dv_i/dt = <U_i, G>``, ``tau dU_i/dt = v_i G`` with ``G =
    linear_attention.merged.gradient``. Every entry's z-score against its prediction must be
    within the Bonferroni threshold over all of them.

    Controls: at ``w ~ N(mu, I)`` the reading "the vector blocks never move" (prediction 0) must
    be rejected (its expected |z| is the derived flow over the measured standard error); at the
    paper's prior the live blocks' flow is not 0 (same statistic, the eq.-8 values over the
    standard error), so the estimator sees a flow of this size where there is one.

    Quick profile (4e4 sequences in 200 batches of 200; the smallest deviation it detects, z_crit
    s.e., 0.14-0.26 in the flow's units at seed 0 against the control's 0.46-0.84), seeds 0-19:
    20/20 pass, worst discrepancy/tolerance 0.564 (seed 10); controls rejected at every seed, max
    |z| at least 5.2 (mu != 0) and 7.3 (live blocks) times the threshold (expected at least 5.3 and
    7.3 times). The s.e. come from 200 batch gradients, so the threshold is Student's t with 199 degrees
    of freedom (:func:`verify.stats.t_threshold`; the normal one would make the family-wise false
    alarm several times 1e-6).
    """
    from verify.models.linear_attention import MergedLinearAttention
    from verify.models.linear_attention_separate import SeparateLinearAttention
    from verify.tasks.in_context_regression import random_covariance

    D, H, R, N = (ctx.setting(k) for k in ("D", "H", "R", "N"))
    samples, batch = ctx.setting("samples"), ctx.setting("batch")
    if samples < 2 * batch:
        raise ValueError(f"samples: need at least two batches of {batch}, got {samples}")
    eig = np.resize(np.asarray(EIGENVALUES), D) * (1.0 + 0.1 * np.arange(D))
    Lam = random_covariance(ctx.rng, eig)
    mu_c = ctx.rng.standard_normal(D)
    mu_c *= ctx.setting("mu_norm") / np.linalg.norm(mu_c)
    v = ctx.rng.standard_normal(H)
    U = ctx.rng.standard_normal((H, D, D)) / np.sqrt(D)
    k = ctx.rng.standard_normal((H, R, D)) / np.sqrt(D)
    q = ctx.rng.standard_normal((H, R, D)) / np.sqrt(D)
    gen = ctx.torch_generator("cpu")

    merged = MergedLinearAttention(D, H, N).init_(gen, 1.0).load_(v, U)       # * blocks random
    separate = SeparateLinearAttention(D, H, R, N).init_(gen, 1.0).load_(v, k, q)
    separate.set_zero_blocks_(np.zeros((H, D)), np.zeros((H, R)))
    G = np.asarray(_cf("linear_attention.merged.gradient", Lambda=Lam, N=N, M=np.einsum("h,hde->de", v, U)), float)
    live = np.concatenate([np.einsum("hde,de->h", U, G), (v[:, None, None] * G).ravel()])

    n_zero_m = 2 * H * D  # the merged layer's vector blocks, before its live blocks
    runs, zs, ctrl = {}, [], {}
    priors = (("paper prior, mu = 0", np.zeros(D)), (f"control prior, |mu| = {ctx.setting('mu_norm'):g}", mu_c))
    for prior, mu in priors:
        m_est = _zero_block_flows(merged, Lam, N, mu, samples, batch, gen, separate=False)
        s_est = _zero_block_flows(separate, Lam, N, mu, samples, batch, gen, separate=True)
        pred_m = _predicted(Lam, N, mu, v, U)
        pred_s = _predicted(Lam, N, mu, v, k, q)
        z_m = (m_est.mean[:n_zero_m] - pred_m) / m_est.se[:n_zero_m]
        z_s = (s_est.mean - pred_s) / s_est.se
        zs += [z_m, z_s]
        runs[prior] = {"ATTN_M vector blocks (MC, derived, s.e.)": [m_est.mean[:n_zero_m], pred_m, m_est.se[:n_zero_m]],
                       "ATTN_S vector blocks (MC, derived, s.e.)": [s_est.mean, pred_s, s_est.se]}
        if np.any(mu):
            z0 = np.concatenate([m_est.mean[:n_zero_m] / m_est.se[:n_zero_m], s_est.mean / s_est.se])
            expected = np.concatenate([pred_m / m_est.se[:n_zero_m], pred_s / s_est.se])
            ctrl["prior"] = (float(np.max(np.abs(z0))), float(np.max(np.abs(expected))))
        else:
            z_live = (m_est.mean[n_zero_m:] - live) / m_est.se[n_zero_m:]
            zs.append(z_live)
            ctrl["live"] = (float(np.max(np.abs(m_est.mean[n_zero_m:] / m_est.se[n_zero_m:]))),
                            float(np.max(np.abs(live / m_est.se[n_zero_m:]))))
            runs[prior]["ATTN_M live blocks v_i, U_i vs eq. 8 (MC, predicted, s.e.)"] = [
                m_est.mean[n_zero_m:], live, m_est.se[n_zero_m:]]
    z_all = np.concatenate(zs)
    dof = samples // batch - 1  # the s.e. come from the spread of samples // batch batch gradients
    z_crit = t_threshold(z_all.size, dof)
    worst = float(np.max(np.abs(z_all)))
    return Outcome(
        measured={"max |z|": worst},
        predicted={"vector blocks": "0 at mu = 0 (eqs. 40-41); the derived flow at mu != 0",
                   "live blocks": "eq. 8"},
        discrepancy=worst, tolerance=z_crit,
        criterion=(f"max |z| over {z_all.size} entries (the vector blocks of both layers at both priors, the "
                   f"live blocks of ATTN_M at the paper's) <= {z_crit:.2f} (Bonferroni over Student's t with {dof} "
                   f"degrees of freedom, false alarm 1e-6); "
                   f"{samples} sequences per layer and prior in autograd batches of {batch}; D = {D}, H = {H}, "
                   f"R = {R}, N = {N}"),
        controls=[Control("w ~ N(mu, I): the vector blocks never move (predicted 0): max |z|", ctrl["prior"][0],
                          z_crit, expected=ctrl["prior"][1]),
                  Control("paper's prior: the live blocks of ATTN_M do not move (predicted 0): max |z|",
                          ctrl["live"][0], z_crit, expected=ctrl["live"][1])],
        details={"Lambda eigenvalues": eig, "mu (control)": mu_c, "per prior": runs},
    )


@check("linear_attention.zero_blocks.symbolic_paper_prior", covers=[VALUE, KQ], method="symbolic",
       title="The derived flows of the vector blocks are exactly 0 at mu = 0 (eqs. 40-41, App. F.1)")
def symbolic_paper_prior(ctx):
    """Eqs. 40-41 as printed: at the paper's prior ``w ~ N(0, I)`` the population gradients of the
    vector blocks vanish at zero. Both derived flows (linear and cubic in ``mu``) are set to ``mu =
    0`` and simplified; control: at ``mu != 0`` they are not identically 0."""
    import theory
    from theory.linear_attention.zero_blocks import at_paper_prior

    exprs = {cid: theory.get(cid).expr for cid in (VALUE, KQ)}
    at_zero = {cid: at_paper_prior(e) for cid, e in exprs.items()}
    nonzero = [cid for cid, e in at_zero.items() if not e.is_ZeroMatrix and e != 0]
    not_trivial = [cid for cid, e in exprs.items() if e.is_ZeroMatrix or e == 0]
    return Outcome(
        measured={cid: str(e) for cid, e in at_zero.items()},
        predicted={"at mu = 0": "0"},
        discrepancy=float(len(nonzero)), tolerance=0.0,
        criterion="both derived flows simplify to the zero vector at mu = 0 (symbolic)",
        controls=[Control("the flows are 0 for every prior (a derivation that lost mu): records not identically 0",
                          float(len(exprs) - len(not_trivial)), 0.0, expected=float(len(exprs)))],
        details={"records": list(exprs), "not zero at mu = 0": nonzero},
    )
