"""Checks of the multi-layer closed forms of Ahn, Cheng, Daneshmand, Sra 2023 (Theorems 2-4).

Data model of Theorems 3-4: ``x ~ N(0, Sigma)``, ``w* ~ N(0, Sigma^{-1})``, noiseless
labels, ``n`` context examples; layers of eq. 8 (``Q_l = -[[A_l, 0], [0, 0]]``) or eq. 11
(GD++, ``P_l = [[B_l, 0], [0, 1]]``, ``Q_l = [[A_l, 0], [0, 0]]``) run by the transformer of
:mod:`verify.models.linear_transformer` on prompts of :mod:`verify.tasks.preconditioned_gd`.
Monte Carlo comparisons use z-scores against the family-wise threshold
:func:`verify.stats.z_threshold` (false alarm 1e-6 per check); the losses are heavy-tailed
for ``L >= 2`` (a degree-2L polynomial of a Wishart spectrum), so the sample sizes are
1e5 prompts or more and the standard errors come from the per-prompt values.

Contains
--------
``preconditioned_gd.wishart.mc_trace_moments``
    ``E tr S_u^k`` (k = 1..6) against sampled white Wishart matrices.
``preconditioned_gd.multi_layer.spectral_reduction``
    Per context, ``E[(TF_L - y_q)^2 | context]`` of the transformer (probed exactly) equals
    ``sum_k r(s_k)^2`` over the eigenvalues of ``Sigma^{-1} S`` (eq. 8 and GD++): Sigma drops out.
``preconditioned_gd.multi_layer.mc_loss``
    The loss polynomial against the transformer's Monte Carlo loss, L = 1, 2, 3.
``preconditioned_gd.multi_layer.mc_gradient``
    Autograd gradients (per prompt, torch) w.r.t. the full ``A_l``: ``g_l Sigma`` on S,
    zero at the optimal steps (Theorem 3's critical points).
``preconditioned_gd.gdpp.mc_gradient_structure``
    GD++ on ``{A_l = a_l Sigma^{-1}, B_l = b_l I}``: ``grad_A`` is proportional to Sigma and
    ``grad_B`` to I (Theorem 4), and the loss equals the GD++ polynomial.
``preconditioned_gd.gdpp.mc_gradient_full``
    The GD++ optimum at ``L = 2`` embedded in full ``(P_l, Q_l)``: every entry's gradient
    vanishes except the label-label entries ``[Q_l]_{d+1,d+1}`` (not a critical point of the
    full parametrisation); at ``L = 1`` (Theorem 1's optimum) all of them vanish.

References
----------
.. [1] K. Ahn, X. Cheng, H. Daneshmand, S. Sra, "Transformers learn to implement
   preconditioned gradient descent for in-context learning", NeurIPS 2023, Theorems 3-4,
   App. B.2-B.3.
"""

from __future__ import annotations

import numpy as np

import theory
from theory.preconditioned_gd.wishart import matching_counts
from verify import Control, Outcome, check
from verify.models.linear_transformer import general_layers, predict, sparse_layers
from verify.stats import batch_mean, z_threshold
from verify.tasks.preconditioned_gd import Prompts, distorted_covariance, sample_prompts

#: The paper's sizes (§4.3): context length and dimension.
N_PAPER, D_PAPER = 20, 5
#: Prompts per forward call (bounded memory).
CHUNK = 20_000

MOMENTS = "preconditioned_gd.wishart.trace_moments"
LOSS = "preconditioned_gd.multi_layer.loss"
STEPS = "preconditioned_gd.multi_layer.optimal_steps"
OPT_LOSS = "preconditioned_gd.multi_layer.optimal_loss"
GRAD = "preconditioned_gd.multi_layer.gradient_scales"
GDPP = "preconditioned_gd.gdpp.loss"


def _cf(id: str, **kwargs):
    return theory.get(id)(**kwargs)


def _chunks(total: int, chunk: int = CHUNK):
    while total > 0:
        yield min(chunk, total)
        total -= chunk


def _max_abs_z(est, predicted) -> float:
    return float(np.max(np.abs(est.z(predicted))))


# -- reference spectra and wrong moment models -----------------------------------------
def white_spectra(rng: np.random.Generator, n: int, d: int, batch: int) -> np.ndarray:
    """Eigenvalues (batch, d) of ``S_u = (1/n) sum_{i<=n} u_i u_i^T``, ``u_i ~ N(0, I_d)``."""
    G = rng.standard_normal((batch, d, n))
    return np.linalg.eigvalsh(np.einsum("bdi,bei->bde", G, G) / n)


def planar_moments(n: int, d: int, K: int = 6) -> np.ndarray:
    """Wrong model (negative control): only the planar pairings (``r + c = k + 1``), i.e.
    the Marchenko-Pastur moments at finite ``n, d`` without the real-Gaussian corrections."""
    return np.array([sum(cnt * d**r * n ** (c - k) for (r, c), cnt in matching_counts(k).items()
                         if r + c == k + 1) for k in range(1, K + 1)], dtype=float)


def kernel_polynomial(a) -> np.ndarray:
    """Coefficients ``c_0..c_L`` of ``prod_l (1 - a_l s)``."""
    c = np.array([1.0])
    for al in a:
        c = np.convolve(c, [1.0, -al])
    return c


def loss_from_moments(a, m_with_zero) -> float:
    """``sum_{j,k} c_j c_k m_{j+k}`` for moments ``(m_0, m_1, ...)``."""
    c = kernel_polynomial(a)
    L = len(c)
    return float(sum(c[j] * c[k] * m_with_zero[j + k] for j in range(L) for k in range(L)))


def residual_polynomial(s, a, b=None) -> np.ndarray:
    """``r(s)`` of the spectral form (spec §2.6), elementwise in ``s``.

    ``b is None``: eq. 8, ``r(s) = prod_l (1 - a_l s)``. Otherwise GD++ (eq. 11, ``Q_l =
    +[[A_l, 0], [0, 0]]``, ``A_l = a_l Sigma^{-1}``, ``B_l = b_l I``): ``p_0 = 1``,
    ``p_{l+1} = p_l (1 + a_l b_l s p_l^2)``, ``r(s) = prod_l (1 + a_l s p_l(s)^2)``.
    """
    s = np.asarray(s, dtype=float)
    r = np.ones_like(s)
    if b is None:
        for al in a:
            r = r * (1 - al * s)
        return r
    p = np.ones_like(s)
    for l, al in enumerate(a):
        r = r * (1 + al * s * p**2)
        if l < len(a) - 1:
            p = p * (1 + al * b[l] * s * p**2)
    return r


# -- (a) Wishart trace moments ----------------------------------------------------------
@check("preconditioned_gd.wishart.mc_trace_moments", covers=[MOMENTS], method="monte_carlo",
       title="Wishart trace moments E tr S_u^k, k = 1..6, against sampled white Wishart matrices")
def mc_trace_moments(ctx):
    configs = [(4, 3), (N_PAPER, D_PAPER), (2, 6)]  # small n; the paper's sizes; rank-deficient n < d
    total = ctx.pick(quick=200_000, full=4_000_000)
    k = np.arange(1, 7)
    per, zs, z_m3, z_planar = {}, [], [], []
    e_m3, e_planar = [], []  # expected control z: |wrong - true closed form| / measured s.e.
    for n, d in configs:
        acc = batch_mean()
        for size in _chunks(total, 50_000):
            s = white_spectra(ctx.rng, n, d, size)
            acc.add((s[:, :, None] ** k).sum(axis=1))
        est = acc.result()
        m = _cf(MOMENTS, n=n, d=d)
        wrong_m3 = m.copy()
        wrong_m3[2] -= 4 * n * d / n**3  # E tr W^3 without its "+4" term
        zs.append(est.z(m))
        z_m3.append(est.z(wrong_m3))
        z_planar.append(est.z(planar_moments(n, d)))
        e_m3.append(np.abs(wrong_m3 - m) / est.se)
        e_planar.append(np.abs(planar_moments(n, d) - m) / est.se)
        per[f"n={n},d={d}"] = {"predicted": m.tolist(), "measured": est.mean.tolist(),
                               "rel_se": (est.se / m).tolist(), "z": zs[-1].tolist()}
    z_crit = z_threshold(6 * len(configs))
    disc = float(np.max(np.abs(zs)))
    return Outcome(
        measured={c: v["measured"] for c, v in per.items()},
        predicted={c: v["predicted"] for c, v in per.items()},
        discrepancy=disc, tolerance=z_crit,
        criterion=f"max |z| over {6 * len(configs)} moments (k = 1..6 at (n, d) = {configs}), "
                  f"{total} white Wishart samples each, per-sample s.e.; family-wise false alarm 1e-6",
        controls=[Control("m_3 without the +4 n d term", float(np.max(np.abs(z_m3))), z_crit,
                          expected=float(np.max(e_m3))),
                  Control("planar (Marchenko-Pastur) pairings only", float(np.max(np.abs(z_planar))), z_crit,
                          expected=float(np.max(e_planar)))],
        details={"samples_per_config": total, "per_config": per},
    )


# -- the transformer's conditional loss, probed exactly --------------------------------------
def probe_error_matrix(X_context: np.ndarray, P, Q) -> np.ndarray:
    """The matrix ``M`` with ``TF_L - y_q = x_q^T M w*`` for each context (B, d, n).

    ``TF_L - y_q`` is bilinear in the query ``x_q`` and the task ``w*`` (the mask keeps the
    query out of the keys and values, and the layers are linear in the labels), so running
    the transformer with ``w* = e_i``, ``x_q = e_j`` gives ``M_{ji}``.
    """
    B, d, n = X_context.shape
    I = np.eye(d)
    # (B, i, j) prompts: context X_c, task e_i, query e_j
    X = np.concatenate([np.broadcast_to(X_context[:, None, None], (B, d, d, d, n)),
                        np.broadcast_to(I[None, None, :, :, None], (B, d, d, d, 1))], axis=-1)
    w = np.broadcast_to(I[None, :, None, :], (B, d, d, d))
    pr = Prompts(X=X.reshape(B * d * d, d, n + 1), w=w.reshape(B * d * d, d))
    err = predict(pr.tokens(), P, Q) - pr.target
    return err.reshape(B, d, d).transpose(0, 2, 1)  # [b, j, i]


def _whitened_spectra(S: np.ndarray, Sigma: np.ndarray) -> np.ndarray:
    C = np.linalg.cholesky(Sigma)
    Ci = np.linalg.inv(C)
    return np.linalg.eigvalsh(Ci @ S @ Ci.T)  # eig(Sigma^{-1} S) = eig(S_u)


@check("preconditioned_gd.multi_layer.spectral_reduction", covers=[LOSS], method="monte_carlo",
       title="Per context, the transformer's conditional loss on S is sum_k r(s_k)^2 (Sigma drops out)")
def spectral_reduction(ctx):
    n, d = N_PAPER, D_PAPER
    B = ctx.pick(quick=400, full=4000)
    Sigma = distorted_covariance(ctx.rng)
    Si = np.linalg.inv(Sigma)
    pr = sample_prompts(ctx.rng, Sigma, n, B, task="inverse")
    s = _whitened_spectra(pr.S, Sigma)

    def conditional(P, Q):
        M = probe_error_matrix(pr.context, P, Q)
        return np.einsum("ij,bjk,kl,bil->b", Sigma, M, Si, M)  # tr(Sigma M Sigma^{-1} M^T)

    rows, gaps = {}, []
    cases = [("eq. 8, L = 3", ctx.rng.uniform(0.2, 1.5, 3), None),
             ("eq. 8, L = 1", ctx.rng.uniform(0.2, 1.5, 1), None),
             ("GD++, L = 3", -ctx.rng.uniform(0.2, 1.5, 3), ctx.rng.uniform(0.2, 1.0, 3))]
    controls = []
    for name, a, b in cases:
        if b is None:
            P, Q = sparse_layers([al * Si for al in a])
        else:
            P, Q = general_layers([al * Si for al in a], [bl * np.eye(d) for bl in b])
        got = conditional(P, Q)
        want = (residual_polynomial(s, a, b) ** 2).sum(axis=1)
        gap = float(np.max(np.abs(got - want) / want))
        gaps.append(gap)
        rows[name] = {"a": a.tolist(), "b": None if b is None else b.tolist(), "max_rel_gap": gap}
        if name == "eq. 8, L = 3":  # control: a preconditioner not proportional to Sigma^{-1}
            Pc, Qc = sparse_layers([al * np.eye(d) for al in a])
            gap_c = float(np.max(np.abs(conditional(Pc, Qc) - want) / want))
            # exact algebra on fixed contexts (no sampling): the statistic is its own expected value
            controls.append(Control("A_l = a_l I instead of a_l Sigma^{-1}", gap_c, 1e-9, expected=gap_c))
        if b is not None:  # control: eq.-8 sign convention in the GD++ polynomial
            wrong = (residual_polynomial(s, -a, -b) ** 2).sum(axis=1)
            controls.append(Control("GD++ with the eq.-8 minus sign in Q", float(np.max(np.abs(got - wrong) / want)),
                                    1e-9, expected=float(np.max(np.abs(want - wrong) / want))))  # closed-form gap
    disc = max(gaps)
    return Outcome(
        measured=disc, predicted=0.0, discrepancy=disc, tolerance=1e-9,
        criterion=f"max relative gap over {B} contexts (n = {n}, d = {d}, Sigma with eigenvalues "
                  "(1, 1, .25, .0625, 1), random rotation) between tr(Sigma M Sigma^{-1} M^T), M probed "
                  "from the transformer, and sum_k r(s_k)^2 over eig(Sigma^{-1} S); an exact identity, "
                  "1e-9 allows float64 round-off through cond(Sigma) = 16 and degree-13 polynomials",
        controls=controls, details={"cases": rows, "contexts": B},
    )


# -- (b) the loss polynomial vs the transformer ------------------------------------------
def _mc_transformer_loss(rng, Sigma, n, A_list, total, task="inverse", B_list=None):
    P, Q = sparse_layers(A_list) if B_list is None else general_layers(A_list, B_list)
    acc = batch_mean()
    for size in _chunks(total):
        pr = sample_prompts(rng, Sigma, n, size, task=task)
        acc.add((predict(pr.tokens(), P, Q) - pr.target) ** 2)
    return acc.result()


@check("preconditioned_gd.multi_layer.mc_loss", covers=[LOSS, STEPS, OPT_LOSS], method="monte_carlo",
       title="Loss polynomial on S vs Monte Carlo of the L-layer transformer, L = 1, 2, 3")
def mc_loss(ctx):
    n, d = N_PAPER, D_PAPER
    total = ctx.pick(quick=100_000, full=2_000_000)
    Sigma = distorted_covariance(ctx.rng)
    Si = np.linalg.inv(Sigma)
    a_opt = _cf(STEPS, n=n, d=d, L=3)
    cases = [("L=1 random", ctx.rng.uniform(0.3, 1.2, 1)),
             ("L=2 random", ctx.rng.uniform(0.3, 1.2, 2)),
             ("L=3 random", ctx.rng.uniform(0.3, 1.2, 3)),
             ("L=3 optimal", ctx.rng.permutation(a_opt))]
    m_planar = np.concatenate([[d], planar_moments(n, d)])
    rows, z, z_planar = {}, [], []
    e_planar = []  # expected control z: |planar-moment loss - loss| / measured s.e.
    for name, a in cases:
        est = _mc_transformer_loss(ctx.rng, Sigma, n, [al * Si for al in a], total)
        f = _cf(LOSS, n=n, d=d, a=a)
        z.append(float(est.z(f)))
        z_planar.append(float(est.z(loss_from_moments(a, m_planar))))
        e_planar.append(float(abs(loss_from_moments(a, m_planar) - f) / est.se))
        rows[name] = {"a": a.tolist(), "predicted": f, "measured": float(est.mean), "se": float(est.se),
                      "z": z[-1]}
    rows["L=3 optimal"]["optimal_loss"] = _cf(OPT_LOSS, n=n, d=d, L=3)
    # wrong data model: w* ~ N(0, I) (Theorem 1's task) with the same steps, one layer
    a1 = cases[0][1]
    est_id = _mc_transformer_loss(ctx.rng, Sigma, n, [a1[0] * Si], total // 2, task="identity")
    z_id = float(est_id.z(_cf(LOSS, n=n, d=d, a=a1)))
    # expected: the loss under w* ~ N(0, I) is the single-layer loss f(A = a_1 Sigma^{-1})
    f_id = theory.get("preconditioned_gd.single_layer.loss")(Sigma=Sigma, n=n, A=a1[0] * Si)
    e_id = float(abs(f_id - _cf(LOSS, n=n, d=d, a=a1)) / est_id.se)
    z_crit = z_threshold(len(cases))
    return Outcome(
        measured={k: v["measured"] for k, v in rows.items()},
        predicted={k: v["predicted"] for k, v in rows.items()},
        discrepancy=float(np.max(np.abs(z))), tolerance=z_crit,
        criterion=f"max |z| over {len(cases)} step vectors (n = {n}, d = {d}, non-isotropic Sigma, "
                  f"{total} prompts each, per-prompt s.e.; the optimal steps in random order, Lemma 4); "
                  "family-wise false alarm 1e-6",
        controls=[Control("loss with the planar (Marchenko-Pastur) moments", float(np.max(np.abs(z_planar))), z_crit,
                          expected=float(max(e_planar))),
                  Control("data with w* ~ N(0, I) instead of N(0, Sigma^{-1}) (L = 1)", abs(z_id), z_crit,
                          expected=e_id)],
        details={"cases": rows, "prompts": total, "Sigma_eigenvalues": np.linalg.eigvalsh(Sigma).tolist()},
    )


# -- (b') the closed-form steps are the roots of q(a), at exact inputs ------------------------
#: Exact (n, d): small, rank-deficient (n < d), the paper's sizes, and n, d up to 2**53.
ROOT_CASES = ((1, 1), (2, 6), (N_PAPER, D_PAPER), (1000, 7), (10**12, 3), (2**53, 2**40))


def _kernel_roots(L: int, n: int, d: int, dps: int) -> list:
    """The roots of ``q(a) = a^L + c_1 a^(L-1) + ... + c_L`` (``c`` from the Hankel solve
    :func:`~theory.preconditioned_gd.multi_layer.optimal_kernel`, exact at integer n, d), by
    mpmath.polyroots at ``dps`` digits, ascending."""
    import mpmath as mp
    import sympy as sp

    from theory.preconditioned_gd.multi_layer import optimal_kernel

    from theory.symbols import sym

    sn, sd = sym("n"), sym("d")
    c = [sp.Rational(x.subs({sn: n, sd: d})) for x in optimal_kernel(L)]
    with mp.workdps(dps):
        coeffs = [mp.mpf(1)] + [mp.mpf(x.p) / x.q for x in c]
        roots = mp.polyroots(coeffs, maxsteps=400, extraprec=4 * dps)
        return sorted(mp.re(r) for r in roots)


@check("preconditioned_gd.multi_layer.steps_are_kernel_roots", covers=[STEPS], method="high_precision",
       title="The closed-form optimal steps (quadratic formula, Viete's cubic) are the roots of q(a) at exact n, d")
def steps_are_kernel_roots(ctx):
    """The closed form ``optimal_steps`` (L = 1, 2, 3) is derived from the kernel coefficients by
    the quadratic formula and Viete's trigonometric roots, rewritten without cancellation. Here it
    is evaluated at exact integer n, d at 60 digits and compared with the roots of ``q(a)`` found by
    mpmath's polynomial solver from the exact coefficients; the float64 function is compared with
    the same roots."""
    import mpmath as mp
    import sympy as sp

    from theory.preconditioned_gd.multi_layer import optimal_steps_of
    from theory.symbols import sym

    dps = 60
    sn, sd = sym("n"), sym("d")
    # the derived expressions, evaluated in mpmath arithmetic (n, d below 2**60 are exact mpf)
    forms = {L: sp.lambdify((sn, sd), list(optimal_steps_of(L)), modules="mpmath") for L in (1, 2, 3)}
    worst_exact = worst_float = worst_recip = worst_shift = 0.0
    rows = {}
    with mp.workdps(dps):
        for n, d in ROOT_CASES:
            for L in (1, 2, 3):
                roots = _kernel_roots(L, n, d, dps)
                closed = forms[L](mp.mpf(n), mp.mpf(d))
                shifted = forms[L](mp.mpf(n + 1), mp.mpf(d))
                numeric = np.asarray(_cf(STEPS, n=n, d=d, L=L), dtype=float)[:L]
                rel = [abs(a - r) / abs(r) for a, r in zip(closed, roots)]
                worst_exact = max(worst_exact, float(max(rel)))
                f_rel = max(abs(mp.mpf(float(a)) - r) / abs(r) for a, r in zip(numeric, roots))
                worst_float = max(worst_float, float(f_rel))
                worst_shift = max(worst_shift, float(max(abs(a - r) / abs(r) for a, r in zip(shifted, roots))))
                if L > 1:  # the roots of p(s) (the reciprocals) in place of q's
                    recip = sorted(1 / r for r in roots)
                    worst_recip = max(worst_recip, float(max(abs(a - r) / abs(r) for a, r in zip(recip, roots))))
                rows[f"n={n}, d={d}, L={L}"] = {"roots": [mp.nstr(r, 20) for r in roots],
                                                "closed form rel. error": float(max(rel)),
                                                "float64 rel. error": float(f_rel)}
    tol_exact, tol_float = 1e-45, 1e-12
    return Outcome(
        measured={"closed form (60 digits)": worst_exact, "float64 function": worst_float},
        predicted=0.0, discrepancy=worst_exact, tolerance=tol_exact,
        passed=bool(worst_exact <= tol_exact and worst_float <= tol_float),
        criterion=f"max relative |a_closed - a_root| over n, d in {list(ROOT_CASES)} and L = 1, 2, 3 at {dps} digits "
                  f"<= {tol_exact} (an exact identity: only the working precision separates them), and the float64 "
                  f"function within {tol_float} relative (round-off ~1e-15; a cancelling form loses all digits at "
                  "n = 2**53)",
        controls=[Control("roots of p(s) (reciprocals of q's roots), L = 2, 3", worst_recip, tol_exact,
                          expected=worst_recip),
                  Control("closed form at n + 1 (off by one in the context length)", worst_shift, tol_exact,
                          expected=worst_shift)],
        details={"cases": rows, "dps": dps,
                 "controls' expected statistics": "deterministic: the statistic itself, computed from the exact roots"},
    )


# -- (c) gradients on S: autograd of the transformer, per prompt ---------------------------
def per_prompt_gradients(ctx, Sigma, n, weights: dict, parametrisation: str, total: int,
                         stats=None):
    """Mean and s.e. of the per-prompt gradients of ``(TF_L - y_q)^2`` w.r.t. the full weight
    matrices (torch autograd through :class:`LinearTransformer`, float64).

    ``weights``: ``{"A": (L, d, d)}`` (sparse, eq. 8), ``{"A": ..., "B": ...}`` (GD++,
    eq. 11) or ``{"P": (L, d+1, d+1), "Q": ...}`` (every entry, "full"). Returns ``{name: MeanEstimate}``: by default of each weight's gradient (L, d, d);
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

    def loss_one(p, Z, y):
        pred = -functional_call(model, p, (Z[None],))[0, d, -1]
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
        for size in _chunks(total, 10_000):
            batch = sample_tokens_torch(None, n, size, generator=gen, task="inverse", chol=chol)
            g = per_grad(params, batch.Z, batch.y_q)
            g = {k: v.detach().numpy() for k, v in g.items()}
            for k, fn in stats.items():
                accs[k].add(fn(g))
    finally:
        torch.set_num_threads(threads)
    return {k: acc.result() for k, acc in accs.items()}


@check("preconditioned_gd.multi_layer.mc_gradient", covers=[GRAD, STEPS], method="torch",
       title="Autograd gradient w.r.t. the full A_l: g_l Sigma on S, zero at the optimal steps")
def mc_gradient(ctx):
    n, d, L = N_PAPER, D_PAPER, 3
    total = ctx.pick(quick=100_000, full=1_000_000)
    Sigma = distorted_covariance(ctx.rng)
    Si = np.linalg.inv(Sigma)
    a_rand = ctx.rng.uniform(0.3, 1.2, L)
    a_opt = _cf(STEPS, n=n, d=d, L=L)
    a_pert = a_opt * np.array([1.0, 1.2, 1.0])  # the middle step 20% too long
    points = {"random point of S": a_rand, "optimal steps": a_opt, "perturbed optimum": a_pert}
    est, pred = {}, {}
    for name, a in points.items():
        est[name] = per_prompt_gradients(ctx, Sigma, n, {"A": np.stack([al * Si for al in a])},
                                         "sparse", total)["A"]
        g = _cf(GRAD, n=n, d=d, a=a)
        pred[name] = g[:, None, None] * Sigma
    z_rand = est["random point of S"].z(pred["random point of S"])
    z_opt = est["optimal steps"].z(0.0)
    z_crit = z_threshold(2 * L * d * d)
    disc = float(max(np.max(np.abs(z_rand)), np.max(np.abs(z_opt))))
    # controls: the perturbed optimum is not critical; at the random point the gradient is
    # not proportional to Sigma^{-1} (same derivative along S, d g_l = <G_l, Sigma^{-1}>)
    z_pert = float(np.max(np.abs(est["perturbed optimum"].z(0.0))))
    g_rand = _cf(GRAD, n=n, d=d, a=a_rand)
    wrong = (d * g_rand / np.trace(Si @ Si))[:, None, None] * Si
    z_inv = float(np.max(np.abs(est["random point of S"].z(wrong))))
    # expected control z: |wrong - true closed form| / measured s.e., max over entries
    g_pert = _cf(GRAD, n=n, d=d, a=a_pert)
    e_pert = float(np.max(np.abs(g_pert[:, None, None] * Sigma) / est["perturbed optimum"].se))
    e_inv = float(np.max(np.abs(wrong - pred["random point of S"]) / est["random point of S"].se))
    tr_se = {k: float(np.max(e.se)) for k, e in est.items()}
    return Outcome(
        measured={k: np.einsum("lij,ij->l", e.mean, Si).tolist() for k, e in est.items()},
        predicted={k: (d * _cf(GRAD, n=n, d=d, a=a)).tolist() for k, a in points.items()},
        discrepancy=disc, tolerance=z_crit,
        criterion=f"max |z| over the {2 * L * d * d} entries of grad_(A_l) f (L = {L}, n = {n}, d = {d}, "
                  f"non-isotropic Sigma; {total} prompts per point, per-prompt autograd, s.e. from the "
                  "per-prompt spread) against g_l Sigma at a random point of S and 0 at the optimal "
                  "steps; family-wise false alarm 1e-6 (measured/predicted: <G_l, Sigma^{-1}> = d g_l)",
        controls=[Control("the perturbed optimum (a_1 x 1.2) taken as critical", z_pert, z_crit, expected=e_pert),
                  Control("gradient proportional to Sigma^{-1} at the random point", z_inv, z_crit, expected=e_inv)],
        details={"points": {k: v.tolist() for k, v in points.items()}, "max_se": tr_se,
                 "max_abs_z": {"random point": float(np.max(np.abs(z_rand))),
                               "optimum": float(np.max(np.abs(z_opt)))}, "prompts": total},
    )


# -- (d) Theorem 4: GD++ on {A_l = a_l Sigma^{-1}, B_l = b_l I} --------------------------------
def _residual_off(direction: np.ndarray):
    """Per prompt: the part of each layer's gradient orthogonal (Frobenius) to ``direction``."""
    unit = direction / np.linalg.norm(direction)

    def fn(G):
        return G - np.einsum("blij,ij->bl", G, unit)[:, :, None, None] * unit
    return fn


def _projection_on(direction: np.ndarray):
    """Per prompt: each layer's gradient projected (Frobenius) on ``direction / ||direction||``."""
    unit = direction / np.linalg.norm(direction)

    def fn(G):
        return np.einsum("blij,ij->bl", G, unit)
    return fn


def _gdpp_scales(n: int, d: int, a, b, h: float = 1e-5):
    """``(g_A, g_B0)`` with ``grad_(A_l) = g_A[l] Sigma`` and ``grad_(B_0) = g_B0 I`` on Theorem
    4's set (``A_l = a_l Sigma^{-1}``, ``B_l = b_l I``), from the closed form by central
    differences: ``df/da_l = <grad_(A_l), Sigma^{-1}> = d g_A[l]``, ``df/db_0 = d g_B0``."""
    a, b = np.asarray(a, float), np.asarray(b, float)

    def f(da=(0.0, 0.0), db=(0.0, 0.0)):
        return _cf(GDPP, n=n, d=d, a=a + np.asarray(da), b=b + np.asarray(db))

    g_A = np.array([(f(da=h * e) - f(da=-h * e)) / (2 * h) for e in np.eye(2)]) / d
    g_B0 = (f(db=(h, 0.0)) - f(db=(-h, 0.0))) / (2 * h) / d
    return g_A, float(g_B0)


#: Box of the random point (eq.-11 sign): ``-a_0 in [0.3, 0.55]``, ``-a_1 in [0.6, 1.05]``,
#: ``b_0 in [0.65, 1]`` (``b_1`` never reaches the output). On a 9^3 grid of this box the
#: closed form gives ``g_B0 >= 0.067`` and ``max_l |g_A[l]| >= 0.110`` (:func:`_gdpp_scales`),
#: so the controls below are never near a point where the wrong form happens to hold; the
#: former box (``-a_0 <= 0.8, -a_1 <= 1.5, b_0 in [0.3, 1]``) held points with ``g_B0 = 0``
#: (seed 19: -0.0002) and ``g_B0 = 0.02`` (seeds 7 and 13, the failed control).
GDPP_BOX = dict(a_low=(0.3, 0.6), a_high=(0.55, 1.05), b_low=(0.65, 0.3), b_high=(1.0, 1.0))


@check("preconditioned_gd.gdpp.mc_gradient_structure", covers=[GDPP], method="torch",
       title="GD++ on S: grad_A proportional to Sigma, grad_B to I (Theorem 4); loss vs the exact polynomial")
def gdpp_gradient_structure(ctx):
    """At a random point of Theorem 4's set (:data:`GDPP_BOX`): the entries of ``grad_(A_l)``
    orthogonal to Sigma and of ``grad_(B_l)`` orthogonal to I vanish, and the Monte Carlo loss
    is the GD++ polynomial (max |z| over 2 L d^2 + 1 statistics).

    Controls (each a 1-d statistic on the same per-prompt gradients, with its expected z from
    the closed form over the measured standard error): ``grad_(A_l)`` proportional to I (the
    projection of ``grad_(A_l)`` on the part of Sigma orthogonal to I is ``g_A[l] ||Sigma -
    tr(Sigma)/d I||_F``, not 0; max over l), ``grad_(B_0)`` proportional to Sigma (the
    projection on the part of I orthogonal to Sigma is ``g_B0 ||I - <I, S> S||_F``, ``S =
    Sigma / ||Sigma||_F``), and the GD++ polynomial with the eq.-8 sign of Q. The projections
    replace the former entrywise max, which spread the same signal over 25 entries: on a grid
    of 36 points of S (20000 prompts each) the projection's expected z was 3.5-5 times the
    entrywise one (the old seed-0 point: 21 entrywise); over seeds 0-19 (quick) the expected
    z are at least 117, 70 and 1894 against the threshold 5.73.
    """
    n, d, L = N_PAPER, D_PAPER, 2
    total = ctx.pick(quick=100_000, full=1_000_000)
    Sigma = distorted_covariance(ctx.rng)
    Si, I = np.linalg.inv(Sigma), np.eye(d)
    a = -ctx.rng.uniform(GDPP_BOX["a_low"], GDPP_BOX["a_high"])  # eq. 11: descent needs a_l < 0
    b = ctx.rng.uniform(GDPP_BOX["b_low"], GDPP_BOX["b_high"])
    weights = {"A": np.stack([al * Si for al in a]), "B": np.stack([bl * I for bl in b])}
    off_A, off_B = _residual_off(Sigma), _residual_off(I)
    R_A = Sigma - np.trace(Sigma) / d * I                      # the part of Sigma orthogonal to I
    R_B = I - (np.trace(Sigma) / np.sum(Sigma**2)) * Sigma     # the part of I orthogonal to Sigma
    stats = {"A off Sigma": lambda g: off_A(g["A"]), "B off I": lambda g: off_B(g["B"]),
             "A on Sigma-perp-I": lambda g: _projection_on(R_A)(g["A"]),
             "B on I-perp-Sigma": lambda g: _projection_on(R_B)(g["B"]), "B": lambda g: g["B"]}
    est = per_prompt_gradients(ctx, Sigma, n, weights, "gdpp", total, stats=stats)
    z_A = est["A off Sigma"].z(0.0)
    z_B = est["B off I"].z(0.0)  # B_{L-1}: gradient exactly 0 (footnote 4), z = 0
    # the loss on the set against the exact GD++ polynomial
    loss = _mc_transformer_loss(ctx.rng, Sigma, n, list(weights["A"]), total, B_list=list(weights["B"]))
    f = _cf(GDPP, n=n, d=d, a=a, b=b)
    z_loss = float(loss.z(f))
    n_tests = 2 * L * d * d + 1
    z_crit = z_threshold(n_tests)
    disc = float(max(np.max(np.abs(z_A)), np.max(np.abs(z_B)), abs(z_loss)))
    f_wrong = _cf(GDPP, n=n, d=d, a=-a, b=-b)  # eq.-8 minus sign: Q_l = -[[A_l, 0], [0, 0]]
    trace_B = np.trace(est["B"].mean, axis1=1, axis2=2) / d
    # expected control z: the closed-form value of each statistic over its measured s.e.
    g_A, g_B0 = _gdpp_scales(n, d, a, b)
    proj_A, proj_B = est["A on Sigma-perp-I"], est["B on I-perp-Sigma"]
    exp_A = float(np.max(np.abs(g_A) * np.linalg.norm(R_A) / proj_A.se))
    exp_B = float(abs(g_B0) * np.linalg.norm(R_B) / proj_B.se[0])
    exp_loss = float(abs(f_wrong - f) / loss.se)
    return Outcome(
        measured={"loss": float(loss.mean), "grad_B_scale": trace_B.tolist(),
                  "max_abs_z_A_off_Sigma": float(np.max(np.abs(z_A))),
                  "max_abs_z_B_off_I": float(np.max(np.abs(z_B)))},
        predicted={"loss": f, "off-direction parts": 0.0},
        discrepancy=disc, tolerance=z_crit,
        criterion=f"max |z| over {n_tests} statistics (L = {L}, n = {n}, d = {d}, non-isotropic Sigma, "
                  f"{total} prompts, per-prompt autograd / loss): the entries of grad_(A_l) orthogonal to "
                  "Sigma and of grad_(B_l) orthogonal to I are 0, and the Monte Carlo loss equals the "
                  f"exact polynomial; family-wise false alarm 1e-6. Controls' expected z (closed form over "
                  f"the measured s.e.): {exp_A:.0f}, {exp_B:.0f}, {exp_loss:.0f}",
        controls=[Control(f"grad_(A_l) proportional to I: projection on Sigma - tr(Sigma)/d I, max over l "
                          f"(expected z {exp_A:.0f})",
                          float(np.max(np.abs(proj_A.z(0.0)))), z_crit, expected=exp_A),
                  Control(f"grad_(B_0) proportional to Sigma: projection on I - <I, Sigma> Sigma / ||Sigma||^2 "
                          f"(expected z {exp_B:.0f})",
                          float(abs(proj_B.z(0.0)[0])), z_crit, expected=exp_B),
                  Control(f"GD++ polynomial with the eq.-8 sign of Q (expected z {exp_loss:.0f})",
                          abs(float(loss.z(f_wrong))), z_crit, expected=exp_loss)],
        details={"a": a.tolist(), "b": b.tolist(), "loss_se": float(loss.se), "prompts": total,
                 "g_A (grad_A_l = g_A Sigma)": g_A.tolist(), "g_B0 (grad_B_0 = g_B0 I)": g_B0,
                 "measured projections (A per l, B per l)": [proj_A.mean.tolist(), proj_B.mean.tolist()],
                 "expected control z": {"A proportional to I": exp_A, "B_0 proportional to Sigma": exp_B,
                                        "eq.-8 sign": exp_loss}},
    )


# -- (e) GD++ inside the full parametrisation ------------------------------------------------
#: Starts (a_0, a_1, b_0) of the local searches on the L = 2 GD++ loss (eq.-11 sign).
GDPP_STARTS = [(-0.5, -3.5, 1.0), (-1.0, -2.5, 0.3), (-2.5, -1.0, 0.3), (-0.3, -1.0, -0.5)]


def gdpp_minima(n: int, d: int, tol: float = 1e-4) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Local minima ``(a, b, f)`` of ``preconditioned_gd.gdpp.loss`` at ``L = 2`` over
    ``(a_0, a_1, b_0)`` (eq.-11 sign; ``b_1`` never reaches the output and is 0), sorted by
    loss: Nelder-Mead then BFGS on the closed form from the :data:`GDPP_STARTS`, duplicates
    (within ``tol``) merged. At ``n = 20, d = 5`` there are two: ``f = 0.0575`` at ``a =
    (-0.517, -3.475), b_0 = 0.868`` and ``f = 0.0865`` at ``a = (-0.769, -2.644), b_0 =
    0.353``."""
    from scipy.optimize import minimize

    def obj(p):
        return float(_cf(GDPP, n=n, d=d, a=[p[0], p[1]], b=[p[2], 0.0]))

    found: list[tuple[np.ndarray, np.ndarray, float]] = []
    for start in GDPP_STARTS:
        res = minimize(obj, start, method="Nelder-Mead",
                       options=dict(xatol=1e-10, fatol=1e-15, maxiter=20_000))
        res = minimize(obj, res.x, method="BFGS", options=dict(gtol=1e-12))
        if not np.isfinite(res.fun):
            continue
        if all(np.max(np.abs(res.x - np.r_[a, b[0]])) > tol for a, b, _ in found):
            found.append((res.x[:2].copy(), np.array([res.x[2], 0.0]), float(res.fun)))
    return sorted(found, key=lambda m: m[2])


@check("preconditioned_gd.gdpp.mc_gradient_full", covers=[GDPP, OPT_LOSS], method="torch",
       title="Full (P, Q): GD++ critical points (Theorem 4, L = 2) are not critical for every "
             "entry (label-label attention [Q_l]_{d+1,d+1}); Theorem 1's optimum (L = 1) is")
def gdpp_gradient_full(ctx):
    """Per-prompt autograd gradients w.r.t. **every** entry of ``P_l, Q_l`` (full
    parametrisation, float64) at the local minima of the ``L = 2`` GD++ loss.

    Theorem 4 is a statement inside form (11). In the full parametrisation the flip ``y ->
    -y`` (a symmetry of the data) maps ``(P, Q)`` to ``(D P D, D Q D)`` with ``D = diag(I,
    -1)``, so at a point of form (11) the gradients of the x-y blocks vanish; ``B_l`` and
    ``A_l`` have zero gradient at a GD++ critical point, and ``[P_l]_{d+1,d+1}`` by the
    rescaling ``P -> cP, Q -> Q/c``. One direction is left: the label-label entry
    ``[Q_l]_{d+1,d+1}``, zero in eq. 11. For ``L = 1`` it multiplies the query label (0) and
    has no effect; for ``L >= 2`` it reaches the output through the next layer's context
    Gram matrix and the query's running label.

    Measured at the two minima of :func:`gdpp_minima`: the z-scores of all ``2 L (d+1)^2 =
    144`` mean gradient entries (Bonferroni threshold, false alarm 1e-6 per family).
    Predicted at the second minimum (``f = 0.0865``): every entry but the two
    ``[Q_l]_{d+1,d+1}`` is zero, and ``[Q_0]_{d+1,d+1}`` is not (its |z| must exceed the
    threshold; one such point shows that Theorem 4's set is not critical for full ``(P,
    Q)``). At the global minimum (``f = 0.0575``: the long second step ``a_1 = -3.47``
    makes the per-prompt gradient a high-degree polynomial of the context's Wishart
    spectrum, heavy-tailed) the z-scores are not reliable normal deviates: seed 0 at 1e6
    prompts gave max |z| 6.3 off the label-label entries against a threshold of 5.8, and
    ``[Q_0]_{d+1,d+1}`` z = -7.9 (mean -0.23 +- 0.03, the same at 2e5 prompts). They are
    reported, not tested, and computed in the full profile only (the quick profile, 1e5
    prompts per point, evaluates the second minimum, the control and ``L = 1``).
    Second family: at ``L = 1`` the Theorem-1 optimum (``A = a* Sigma^{-1}``, the optimal
    step) has all 72 gradient entries zero, including ``[Q_0]_{d+1,d+1}``. Control: the same
    statistic at a perturbed point (``a_1`` 20 % too large) must reject criticality of the
    form-(11) entries.
    """
    n, d = N_PAPER, D_PAPER
    total = ctx.pick(quick=100_000, full=1_000_000)
    Sigma = distorted_covariance(ctx.rng)
    Si, I = np.linalg.inv(Sigma), np.eye(d)
    minima = gdpp_minima(n, d)
    if len(minima) < 2:
        raise RuntimeError(f"expected two local minima of the L = 2 GD++ loss, found {minima}")

    def z_full(a_list, b_list):
        P, Q = general_layers(np.stack([al * Si for al in a_list]),
                              np.stack([bl * I for bl in b_list]))
        est = per_prompt_gradients(ctx, Sigma, n, {"P": P, "Q": Q}, "full", total)
        zP, zQ = est["P"].z(0.0), est["Q"].z(0.0)
        label = np.zeros_like(zQ, dtype=bool)
        label[:, d, d] = True
        rest = float(max(np.abs(zP).max(), np.abs(zQ[~label]).max()))
        return (rest, zQ[:, d, d], est["Q"].mean[:, d, d], est["Q"].se[:, d, d], est["Q"].se[:, :d, :d],
                est["P"].se[:, :d, :d], est["P"].se[:, d, d])

    names = ("global minimum", "second minimum")[ctx.pick(quick=1, full=0):]
    per_min = [z_full(a, b) for a, b, _ in minima[2 - len(names):2]]
    a2, b2, _ = minima[1]
    pert = z_full(a2 * np.array([1.0, 1.2]), b2)
    rest_pert = pert[0]
    # expected control z (a lower bound over the entries with a closed form): the gradients at
    # the perturbed point on Theorem 4's set over the measured s.e.: g_A[l] Sigma for the A-block
    # of Q_l, g_B0 I for the B-block of P_0, and for [P_l]_{d+1,d+1}, by the invariance
    # (P_l, Q_l) -> (c P_l, Q_l / c): <grad Q_l, Q_l> - <grad B_l, B_l> = d (a_l g_A[l] - b_l g_B[l])
    # (g_B[1] = 0: B_{L-1} gets no gradient)
    a_p = a2 * np.array([1.0, 1.2])
    g_A_pert, g_B0_pert = _gdpp_scales(n, d, a_p, b2)
    g_Pdd = d * (a_p * g_A_pert - np.asarray(b2, float) * np.array([g_B0_pert, 0.0]))
    e_pert = float(max(np.max(np.abs(g_A_pert[:, None, None] * Sigma) / pert[4]),
                       np.max(np.abs(g_B0_pert) / np.diag(pert[5][0])),
                       np.max(np.abs(g_Pdd) / pert[6])))
    # L = 1: the optimum of Theorem 1 in the sparse form, every entry free
    a1 = float(np.asarray(_cf(STEPS, n=n, d=d, L=1), dtype=float)[0])
    P1, Q1 = sparse_layers(a1 * Si[None])
    est1 = per_prompt_gradients(ctx, Sigma, n, {"P": P1, "Q": Q1}, "full", total)
    z1 = float(max(np.abs(est1["P"].z(0.0)).max(), np.abs(est1["Q"].z(0.0)).max()))
    n_tests = 2 * 2 * (d + 1) ** 2
    z_crit = z_threshold(n_tests)
    z_crit1 = z_threshold(2 * (d + 1) ** 2)
    parts = {"second minimum: max |z| off the label-label entries / z_crit": per_min[-1][0] / z_crit,
             "second minimum: z_crit / |z| of [Q_0]_{d+1,d+1}": z_crit / abs(float(per_min[-1][1][0])),
             "L = 1: max |z| over every entry / z_crit": z1 / z_crit1}
    return Outcome(
        measured={"max |z| off the label-label entries": {k: m[0] for k, m in zip(names, per_min)},
                  "z of [Q_l]_{d+1,d+1}": {k: m[1] for k, m in zip(names, per_min)},
                  "L = 1: max |z| over every entry": z1},
        predicted={"second minimum, off the label-label entries": 0.0,
                   "second minimum, [Q_0]_{d+1,d+1}": "non-zero", "L = 1": 0.0,
                   "global minimum": "reported in the full profile (heavy-tailed per-prompt "
                                     "gradients)"},
        discrepancy=max(parts.values()), tolerance=1.0,
        criterion=(f"max of normalised parts <= 1 (z_crit = {z_crit:.2f} for {n_tests} entries, "
                   f"{z_crit1:.2f} for 72; false alarm 1e-6; {total} prompts per point, "
                   "per-prompt autograd through the full token forward)"),
        controls=[Control("a_1 20 % too large: max |z| off the label-label entries",
                          rest_pert, z_crit, expected=e_pert)],
        details={"parts": parts,
                 "minima (a, b, gdpp.loss)": [(a, b, f) for a, b, f in minima],
                 "mean gradient of [Q_l]_{d+1,d+1} and s.e.":
                     {k: (m[2], m[3]) for k, m in zip(names, per_min)},
                 "optimal_loss (sparse, L = 2)": float(_cf(OPT_LOSS, n=n, d=d, L=2)),
                 "L = 1 step": a1, "prompts": total,
                 "reading": "Theorem 4's set is critical inside eq. 11 but not for every entry of "
                            "(P, Q): at L >= 2 the label-label attention entry can lower the loss"},
    )
