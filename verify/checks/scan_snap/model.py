"""Checks of the foundations of Scan and Snap (Tian et al. 2023, §3, App. C and H): the gradient of the
1-layer transformer (Lemma 1, eqs. 3-4) and the long-sequence limit of its attention (Lemma 2, eq. 6, and
Lemma 18, eqs. 134-138).

* ``scan_snap.model.lemma1_gradient``: eq. 3 (and eq. 4's row-wise form) against autograd of the objective
  J(Y, Z) (eq. 15), against autograd of the real torch model (:class:`verify.models.scan_snap.
  OneLayerTransformer`, frozen orthonormal embedding: dJ/dW_V = U^T G_Y^T U, dJ/dW_K = U^T G_Z^T U at W_Q =
  sqrt(d) I) and against central finite differences; the row sums of dJ/dY and dJ/dZ are 0.
* ``scan_snap.model.lemma2_long_sequence``: Monte Carlo over the sequence length: X^T b_T -> c_{m,n} with
  (T - 1) E||X^T b_T - c||^2 -> tr(J Sigma J^T) (the delta method on the token frequencies), and X^T diag(b_T) X
  = diag(X^T b_T) exactly (so eq. 6's second limit follows from the first).
* ``scan_snap.model.lemma18_hoeffding``: the token frequencies q_{l|m,n} (eqs. 134-135, 137) and the coverage of
  eq. 136's band P(l) +- sqrt(ln(2/delta)/(2(T-1))), at least 1 - delta (eq. 138).
"""

from __future__ import annotations

import math

import numpy as np

from verify import Control, Outcome, check
from verify.models.scan_snap import OneLayerTransformer, eq3_gradients
from verify.settings import Setting
from verify.stats import batch_mean, z_threshold


def _objective_torch(Y, Z, context, query, label):
    import torch

    a = Z[query, context]
    b = torch.softmax(a, 0)
    v = torch.zeros(Y.shape[0], dtype=Y.dtype).index_add(0, context, b)
    ln = v / v.norm()
    logits = Y.T @ ln
    return logits[label] - torch.logsumexp(logits, 0)


def _objective_numpy(Y, Z, context, query, label):
    a = Z[query, context]
    b = np.exp(a - a.max())
    b /= b.sum()
    v = np.zeros(Y.shape[0])
    np.add.at(v, context, b)
    logits = Y.T @ (v / np.linalg.norm(v))
    mx = logits.max()
    return logits[label] - mx - math.log(np.exp(logits - mx).sum())


@check("scan_snap.model.lemma1_gradient", method="torch", covers=[],
       title="Lemma 1 (eqs. 3-4): dJ/dY, dJ/dZ against autograd of J(Y, Z) and of the real 1-layer transformer, "
             "and central differences; row sums 0",
       settings=[Setting("trials", "int", quick=20, full=200, low=1, high=10**5,
                         doc="random (Y, Z, sequence) draws (M = 12, T - 1 = 40)")])
def lemma1_gradient(ctx):
    """Eq. 3 against three independent gradients.

    For each trial: M = 12, Y, Z with N(0, 1) entries, a query m, a label n and T - 1 = 40 contextual tokens drawn
    uniformly (so some repeat). Criterion (statistic = max of the ratios, pass if <= 1): relative max error of eq. 3
    against torch autograd of eq. 15 (float64) / 1e-12; against autograd of OneLayerTransformer (d = M, frozen
    orthogonal U, W_Q = sqrt(d) I, random W_K, W_V; Y = U W_V^T U^T, Z = U W_K^T U^T) mapped by dJ/dW_V = U^T G_Y^T
    U, dJ/dW_K = U^T G_Z^T U / 1e-10 (a product of three orthogonal factors); against central differences of eq. 15
    (numpy, step 1e-5, 30 random entries per trial) / 1e-7 (truncation h^2 ~ 1e-10, round-off eps/h ~ 1e-11); row
    sums of G_Y and G_Z (and rows of G_Z other than m) / 1e-13 (12-term sums of O(1) entries, ~12 eps). Control: eq. 3
    without P^perp.

    Measured (quick, seeds 0-19): pass 20/20, worst statistic 0.02 (relative errors ~1e-15 vs autograd, ~1e-10 vs
    differences); control (no P^perp) >= 6e9 x its tolerance. About 1 s.
    """
    import torch

    rng = ctx.rng
    M, T1 = 12, 40
    err_auto = err_model = err_fd = rows = 0.0
    ctrl, e_ctrl = np.inf, np.inf
    for _ in range(ctx.setting("trials")):
        Y, Z = rng.standard_normal((M, M)), rng.standard_normal((M, M))
        m, n = (int(i) for i in rng.integers(M, size=2))
        ctx_tok = rng.integers(M, size=T1)
        GY, GZ = eq3_gradients(Y, Z, ctx_tok, m, n)
        # (1) autograd of eq. 15
        Yt = torch.tensor(Y, requires_grad=True)
        Zt = torch.tensor(Z, requires_grad=True)
        _objective_torch(Yt, Zt, torch.as_tensor(ctx_tok), m, n).backward()
        scale = max(np.abs(GY).max(), np.abs(GZ).max())
        err_auto = max(err_auto, np.abs(Yt.grad.numpy() - GY).max() / scale, np.abs(Zt.grad.numpy() - GZ).max() / scale)
        # (2) the real model
        g = torch.Generator().manual_seed(int(rng.integers(2**31)))
        model = OneLayerTransformer(M, init="zero", generator=g)
        with torch.no_grad():
            model.W_K.copy_(torch.randn(M, M, generator=g, dtype=torch.float64))
            model.W_V.copy_(torch.randn(M, M, generator=g, dtype=torch.float64))
        Ym, Zm = model.logit_matrices()
        GYm, GZm = eq3_gradients(Ym, Zm, ctx_tok, m, n)
        logits, _ = model(torch.as_tensor(ctx_tok)[None], torch.tensor([m]))
        J = logits[0, n] - torch.logsumexp(logits[0], 0)
        J.backward()
        U = model.U.detach().numpy()
        sc = max(np.abs(GYm).max(), np.abs(GZm).max())
        err_model = max(err_model, np.abs(model.W_V.grad.numpy() - U.T @ GYm.T @ U).max() / sc,
                        np.abs(model.W_K.grad.numpy() - U.T @ GZm.T @ U).max() / sc)
        # (3) central differences of eq. 15 (numpy)
        h = 1e-5
        for _ in range(15):
            for G, which in ((GY, "Y"), (GZ, "Z")):
                i, j = (int(k) for k in rng.integers(M, size=2))
                if which == "Z":
                    i = m if rng.random() < 0.8 else i
                A = (Y if which == "Y" else Z).copy()
                A[i, j] += h
                fp = _objective_numpy(A if which == "Y" else Y, A if which == "Z" else Z, ctx_tok, m, n)
                A[i, j] -= 2 * h
                fm = _objective_numpy(A if which == "Y" else Y, A if which == "Z" else Z, ctx_tok, m, n)
                err_fd = max(err_fd, abs((fp - fm) / (2 * h) - G[i, j]) / scale)
        # row sums (Lemma 1's corollary) and eq. 4 (only row m moves)
        others = np.delete(np.arange(M), m)
        rows = max(rows, np.abs(GY.sum(1)).max() / scale, np.abs(GZ.sum(1)).max() / scale,
                   np.abs(GZ[others]).max() / scale)
        # control: eq. 3 without the projector
        _, GZbad = eq3_gradients(Y, Z, ctx_tok, m, n, projector=False)
        ctrl = min(ctrl, np.abs(Zt.grad.numpy() - GZbad).max() / scale / 1e-12)
        e_ctrl = min(e_ctrl, np.abs(GZ - GZbad).max() / scale / 1e-12)
    stat = max(err_auto / 1e-12, err_model / 1e-10, err_fd / 1e-7, rows / 1e-13)
    return Outcome(
        measured={"eq. 3 vs autograd of eq. 15": err_auto, "eq. 3 vs the torch model": err_model,
                  "eq. 3 vs central differences": err_fd, "row sums, other rows of G_Z": rows},
        predicted=0.0, discrepancy=float(stat), tolerance=1.0,
        criterion="max of relative max errors over the trials: eq. 3 vs autograd of eq. 15 / 1e-12, vs autograd of "
                  "the torch model / 1e-10, vs central differences (h = 1e-5) / 1e-7, row sums and off-query rows of "
                  "G_Z / 1e-13; pass if <= 1",
        controls=[Control("eq. 3 without P^perp (the dZ of eq. 4 with P^perp dropped) vs autograd", float(ctrl), 1.0,
                          expected=float(e_ctrl))],
        details={"M": M, "T - 1": T1, "trials": ctx.setting("trials")},
    )


def _class(rng, L):
    P = rng.uniform(0.2, 1.0, L)
    return P / P.sum(), rng.normal(0.0, 1.0, L)


@check("scan_snap.model.lemma2_long_sequence", method="monte_carlo", covers=[],
       title="Lemma 2 (eq. 6) by Monte Carlo over T: (T - 1) E||X^T b_T - c||^2 -> tr(J Sigma J^T); X^T diag(b) X = "
             "diag(X^T b) exactly",
       settings=[Setting("T", "ints", quick=(1001, 10001, 100001), full=(101, 1001, 10001, 100001, 1000001),
                         low=3, high=10**9, doc="sequence lengths T (T - 1 contextual tokens)"),
                 Setting("samples", "int", quick=20000, full=200000, low=100, high=10**8,
                         doc="sequences per T")])
def lemma2_long_sequence(ctx):
    """Lemma 2: given the class (L = 20 contextual tokens, P(l) ~ U(0.2, 1) normalised, logits z_l ~ N(0, 1)), the
    attention-weighted token vector X^T b_T = (q o p)/(q^T p) (eq. 20; q the token counts, p = e^z) tends to c =
    (P o p)/(P^T p) (eq. 5). The delta method on q ~ Multinomial(T - 1, P)/(T - 1) gives (T - 1) E||X^T b - c||^2 ->
    tr(J Sigma J^T), J = (diag(p) - c p^T)/(P^T p), Sigma = diag(P) - P P^T.

    Criterion: |z| of the sample mean of (T - 1)||X^T b - c||^2 against tr(J Sigma J^T), for each T, below
    z_threshold(#T) (family-wise 1e-6); eq. 20 and X^T diag(b) X = diag(X^T b) (eq. 22 with eq. 6's second limit)
    on 200 real sequences of length 101 (softmax over the sequence) to 1e-13. statistic = max(max|z|/threshold,
    identity error/1e-13). Control: the limit without attention, c' = P (z ignored): |z| of (T - 1)||X^T b - P||^2
    against the same value. The O(1/T) bias of the delta method is below 3e-4 relative at T >= 1001 (SE ~ 1%).

    Measured (quick, seeds 0-19): pass 20/20, worst max|z|/threshold 0.56; control (c' = P) >= 1.5e3 x the
    threshold. Under 1 s.
    """
    rng = ctx.rng
    L = 20
    P, z = _class(rng, L)
    p = np.exp(z)
    c = P * p / (P @ p)
    J = (np.diag(p) - np.outer(c, p)) / (P @ p)
    S = np.diag(P) - np.outer(P, P)
    pred = float(np.trace(J @ S @ J.T))
    Ts, R = list(ctx.setting("T")), ctx.setting("samples")
    thr = z_threshold(len(Ts))
    zs, zc, ec, rows = [], [], [], {}
    for T in Ts:
        est, bad = batch_mean(), batch_mean()
        for k in range(0, R, 5000):
            q = rng.multinomial(T - 1, P, size=min(5000, R - k)).astype(float)
            xb = q * p / (q @ p)[:, None]                        # eq. 20 with counts
            est.add((T - 1) * ((xb - c) ** 2).sum(1))
            bad.add((T - 1) * ((xb - P) ** 2).sum(1))
        e, b = est.result(), bad.result()
        zs.append(float(e.z(pred)))
        zc.append(float(b.z(pred)))
        ec.append(float((T - 1) * ((c - P) ** 2).sum() / b.se))   # E[wrong statistic] - pred = (T-1)||c - P||^2
        rows[str(T)] = {"(T-1) E||X^T b - c||^2": float(e.mean), "SE": float(e.se), "predicted": pred}
    # exact identities on real sequences: softmax over the sequence
    ident = 0.0
    for _ in range(200):
        x = rng.choice(L, size=100, p=P)
        a = z[x]
        b = np.exp(a - a.max())
        b /= b.sum()
        X = np.zeros((100, L))
        X[np.arange(100), x] = 1.0
        xb = X.T @ b
        q = X.sum(0)
        ident = max(ident, np.abs(xb - q * p / (q @ p)).max(), np.abs(X.T @ np.diag(b) @ X - np.diag(xb)).max())
    stat = max(max(abs(v) for v in zs) / thr, ident / 1e-13)
    return Outcome(
        measured={"z per T": zs, "identity error": ident}, predicted={"(T-1) E||X^T b - c||^2": pred},
        discrepancy=float(stat), tolerance=1.0,
        criterion=f"max |z| over T of (T-1) E||X^T b - c||^2 against the delta-method tr(J Sigma J^T) / z_threshold("
                  f"{len(Ts)}) = {thr:.2f}; eqs. 20, 22 identities / 1e-13; pass if <= 1",
        controls=[Control("limit without attention (c' = P): max |z| / threshold", max(abs(v) for v in zc) / thr, 1.0,
                          expected=max(ec) / thr)],
        details={"per T": rows, "L": L, "samples": R},
    )


@check("scan_snap.model.lemma18_hoeffding", method="monte_carlo", covers=[],
       title="Lemma 18 (eqs. 134-138): token frequencies q_l (exact rewriting) and the coverage of eq. 136's band "
             ">= 1 - delta, by Monte Carlo over T",
       settings=[Setting("T", "ints", quick=(11, 101, 1001), full=(11, 101, 1001, 10001), low=2, high=10**8,
                         doc="sequence lengths T"),
                 Setting("samples", "int", quick=20000, full=200000, low=100, high=10**8, doc="sequences per T")])
def lemma18_hoeffding(ctx):
    """Eq. 136: with probability >= 1 - delta, |q_{l|m,n} - P(l|m,n)| <= eps = sqrt(ln(2/delta)/(2(T-1))).

    Classes: L = 10 tokens, P(l) ~ U(0.2, 1) normalised. For each T and delta in {0.05, 0.2}: the fraction of R
    sequences (token counts from Multinomial(T - 1, P)) whose q_l is in the band, per token. Criterion: the one-sided
    z = (1 - delta - coverage)/SE (SE = sqrt(cov (1 - cov)/R), floored at 1/R) below z_threshold(family) for every
    (T, delta, l); eq. 137 ((1/(T-1)) X^T h_X = q o h, and eq. 135) on 100 real sequences to 1e-14; and the exact
    binomial coverage (scipy) >= 1 - delta. statistic = max of the ratios. Control: the band at eps/3: its coverage
    falls below 1 - delta; expected z from the exact binomial coverage.

    Measured (quick, seeds 0-19): pass 20/20, worst statistic 0.02 (coverage far above 1 - delta); control (eps/3)
    >= 9.6 x the threshold. Under 1 s.
    """
    from scipy.stats import binom

    rng = ctx.rng
    L = 10
    P = rng.uniform(0.2, 1.0, L)
    P /= P.sum()
    Ts, R = list(ctx.setting("T")), ctx.setting("samples")
    deltas = (0.05, 0.2)
    thr = z_threshold(len(Ts) * len(deltas) * L)
    worst, ctrl, e_ctrl, exact_bad, rows = -np.inf, -np.inf, -np.inf, 0, {}
    for T in Ts:
        q = rng.multinomial(T - 1, P, size=R) / (T - 1)
        for d in deltas:
            eps = math.sqrt(math.log(2 / d) / (2 * (T - 1)))
            for band, tag in ((eps, "eq. 136"), (eps / 3, "control")):
                cov = np.mean(np.abs(q - P) <= band, axis=0)
                se = np.maximum(np.sqrt(cov * (1 - cov) / R), 1 / R)
                z = (1 - d - cov) / se
                k = np.arange(T)                                    # exact: P(|K/(T-1) - P| <= band)
                inside = np.abs(k[:, None] / (T - 1) - P[None, :]) <= band
                exact = (binom.pmf(k[:, None], T - 1, P[None, :]) * inside).sum(0)
                if tag == "eq. 136":
                    worst = max(worst, float(z.max()))
                    exact_bad += int(np.sum(exact < 1 - d))
                    rows[f"T={T}, delta={d}"] = {"min coverage": float(cov.min()), "exact min": float(exact.min())}
                else:
                    ctrl = max(ctrl, float(z.max()))
                    se_e = np.sqrt(np.maximum(exact * (1 - exact), 1 / R) / R)
                    e_ctrl = max(e_ctrl, float(np.max((1 - d - exact) / se_e)))
    ident = 0.0
    h = rng.standard_normal(L)
    for _ in range(100):
        x = rng.choice(L, size=50, p=P)
        X = np.zeros((50, L))
        X[np.arange(50), x] = 1.0
        qv = X.sum(0) / 50
        ident = max(ident, np.abs(X.T @ h[x] / 50 - qv * h).max(),
                    np.abs(X.T @ np.diag(h[x]) @ X / 50 - np.diag(qv * h)).max())
    stat = max(worst / thr, ident / 1e-14, float(exact_bad))
    return Outcome(
        measured={"max one-sided z of 1 - delta - coverage": worst, "identity error": ident,
                  "exact coverages below 1 - delta": exact_bad},
        predicted="coverage >= 1 - delta", discrepancy=float(stat), tolerance=1.0,
        criterion=f"max over (T, delta, l) of z = (1 - delta - coverage)/SE / z_threshold("
                  f"{len(Ts) * len(deltas) * L}) = {thr:.2f}; eqs. 134-135, 137 identities / 1e-14; count of exact "
                  "binomial coverages below 1 - delta; pass if <= 1",
        controls=[Control("band eps/3 (coverage below 1 - delta): max z / threshold", ctrl / thr, 1.0,
                          expected=e_ctrl / thr)],
        details={"coverage": rows, "L": L, "samples": R},
    )
