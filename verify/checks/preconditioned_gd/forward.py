"""Forward-pass identities of the linear transformer of Ahn, Cheng, Daneshmand, Sra 2023.

Each check runs the real masked forward pass (:func:`verify.models.linear_transformer.forward`,
eqs. 2-4) on sampled prompts of the Theorem-3 data model (``x ~ N(0, Sigma)`` with a
distorted ``Sigma``, ``w* ~ N(0, Sigma^{-1})``) and compares it with an algebraic identity
of the paper. The identities are exact, so the tolerance is float64 round-off, and every
convention error (transpose, sign, mask, layer order) shows up as an O(1) relative error.

Contains
--------
``preconditioned_gd.forward.lemma1_gd``
    Lemma 1: the sparse (eq. 8) forward pass is L steps of preconditioned gradient descent
    with ``A_l^T`` (the paper prints ``A_l``; the two agree for symmetric ``A_l``).
``preconditioned_gd.forward.single_layer_reduction``
    App. A.1 (eqs. 14-15): one layer's output is ``b^T G A x_q`` and depends only on the last
    row ``b^T`` of ``P`` and the first ``d`` columns ``A`` of ``Q``.
``preconditioned_gd.forward.lemmas_5_6``
    App. C.2: the query label enters additively (Lemma 6), the loss is ``E [Ybar_L]_{n+1}^2``
    (Lemma 5) and ``Ybar_L = w*^T X_0 prod_l (I + M X_0^T A_l X_0 / n)`` (eq. 25).
``preconditioned_gd.forward.lemma4_permutation``
    Lemma 4 (App. B.4): on ``A_l = a_l Sigma^{-1}`` the outputs are invariant under permuting
    the step sizes ``a_l``; for generic non-commuting ``A_l`` they are not.
``preconditioned_gd.forward.mc_reduced_loss``
    Eqs. 14-15 by Monte Carlo: the loss of one layer with full random ``P, Q`` equals the closed
    form ``f(b, A)`` of the last row of ``P`` and the first ``d`` columns of ``Q`` (Theorem 1's
    data model).

The per-prompt identities are registered in moment form (:mod:`theory.preconditioned_gd.forward`):
the checks evaluate ``preconditioned_gd.forward.single_layer_output`` (eq. 13),
``.residual_operator`` (Lemmas 5-6, eqs. 25, 34, 57) and ``.covariance_step`` (eqs. 34, 57) on
each prompt's context covariance and compare them with the forward pass.
"""

from __future__ import annotations

import itertools

import numpy as np

import theory

from verify import Control, Outcome, check
from verify.settings import Setting
from verify.stats import batch_mean, chunks, z_threshold
from verify.stats import evaluate as _cf
from verify.stats import rel_max as _rel

#: Relative round-off tolerance of the exact forward identities (see each criterion).
ROUNDOFF_RTOL = 1e-12

#: The sizes of every check here (exact identities on sampled prompts).
_SETTINGS = [Setting("n", "int", quick=20, full=20, low=1, high=100, doc="context examples n"),
             Setting("samples", "int", quick=500, full=50_000, low=1, high=10**5, doc="sampled prompts")]


def _setup(ctx, n: int, batch: int):
    from verify.tasks.preconditioned_gd import distorted_covariance, sample_prompts

    Sigma = distorted_covariance(ctx.rng)
    prompts = sample_prompts(ctx.rng, Sigma, n, batch, task="inverse")
    return Sigma, prompts




#: Prompts on which the per-prompt record ``single_layer_output`` is evaluated (one call each;
#: its vectors w*, x_q cannot be stacked).
RECORD_PROMPTS = 5000


def _random_layers(rng, L: int, d: int, scale: float) -> np.ndarray:
    """``L`` non-symmetric ``d x d`` matrices with i.i.d. ``N(0, scale^2 / d)`` entries."""
    return rng.standard_normal((L, d, d)) * (scale / np.sqrt(d))


# =====================================================================================
# Lemma 1
# =====================================================================================
@check("preconditioned_gd.forward.lemma1_gd", covers=[], method="monte_carlo",
       title="Lemma 1: the sparse L-layer forward pass = L steps of preconditioned GD with A_l^T",
       refutes={"Ahn et al. 2023, Lemma 1 (App. C.1)":
                "The forward pass of the layers as defined (eqs. 2-4, 8) is preconditioned GD with "
                "A_l^T, not A_l; the two agree only for symmetric A_l (true at every critical point "
                "the paper discusses). The proof also writes x^(n+1)T A_k x^(j) the wrong way round "
                "and carries a spurious 1/n."},
       settings=_SETTINGS)
def lemma1_gd(ctx):
    """Lemma 1 (App. C.1) with the transpose correction.

    For ``L = 1..4`` random non-symmetric ``A_l`` (entries ``N(0, 0.5^2/d)``; the
    Sigma^{1/2}-scaled products stay O(1) so no layer amplifies round-off), the sparse
    forward pass (eq. 8) gives ``TF_L = -[Z_L]_{d+1,n+1}``; the GD recursion ``w_{l+1} =
    w_l - A_l^T (S w_l - h)`` from ``w_0 = 0`` gives ``<x_q, w_L>``. Also the symmetric case
    with the paper's ``A_l`` (untransposed), where the printed statement is exact.
    """
    from verify.models.linear_transformer import preconditioned_gd, predict, sparse_layers

    n, batch = ctx.setting("n"), ctx.setting("samples")
    Sigma, prompts = _setup(ctx, n, batch)
    d = prompts.d
    # A_l = Sigma^{-1/2} R_l Sigma^{-1/2} with random R_l: A_l S is O(1) along every
    # eigendirection of Sigma
    w, V = np.linalg.eigh(Sigma)
    S_mhalf = V @ np.diag(w ** -0.5) @ V.T
    Z0 = prompts.tokens()
    errs, errs_sym, errs_untransposed, errs_nomask = {}, {}, {}, {}
    gap_gd = {}  # expected: the gap between the wrong and the true closed form, GD(A) vs GD(A^T)
    for L in range(1, 5):
        R = _random_layers(ctx.rng, L, d, 0.5)
        A = np.einsum("ij,ljk,km->lim", S_mhalf, R, S_mhalf)
        P, Q = sparse_layers(A)
        tf = predict(Z0, P, Q)
        gd_t = preconditioned_gd(prompts, np.transpose(A, (0, 2, 1))).prediction
        gd_a = preconditioned_gd(prompts, A).prediction
        errs[L] = _rel(tf, gd_t)
        errs_untransposed[L] = _rel(gd_a, tf)
        gap_gd[L] = _rel(gd_a, gd_t)
        # the symmetric case: the paper's statement with A_l itself
        A_sym = 0.5 * (A + np.transpose(A, (0, 2, 1)))
        Ps, Qs = sparse_layers(A_sym)
        errs_sym[L] = _rel(predict(Z0, Ps, Qs), preconditioned_gd(prompts, A_sym).prediction)
        # the mask matters: attention over all n + 1 columns (query as a key/value)
        Z = Z0
        for Pl, Ql in zip(P, Q):
            Z = Z + np.einsum("kl,bli,bmi,mj,bjc->bkc", Pl, Z, Z, Ql, Z, optimize=True) / n
        errs_nomask[L] = _rel(-Z[:, -1, -1], gd_t)
    worst = max(max(errs.values()), max(errs_sym.values()))
    return Outcome(
        measured={f"L={L}": errs[L] for L in errs},
        predicted=0.0,
        discrepancy=worst,
        tolerance=ROUNDOFF_RTOL,
        criterion=(f"max_L max|TF_L - <x_q, w_L^gd(A^T)>| / max|TF_L| over {batch} prompts "
                   f"(d={d}, n={n}, L=1..4, random non-symmetric A_l; also symmetric A_l with "
                   f"GD(A_l)) <= {ROUNDOFF_RTOL:g}: an exact identity, so only float64 round-off "
                   "(~1e-15 for O(1) sums of n products per layer) remains"),
        # exact algebra on fixed inputs (no sampling): the unmasked forward's gap is its own
        # expected value
        controls=[
            Control("GD with the printed A_l (untransposed), non-symmetric A_l",
                    min(errs_untransposed.values()), ROUNDOFF_RTOL, expected=min(gap_gd.values())),
            Control("attention without the mask (the query as a key/value) vs GD(A^T), L >= 2 "
                    "(at L = 1 the query's label slot is 0, so the mask cannot matter)",
                    min(errs_nomask[L] for L in (2, 3, 4)), ROUNDOFF_RTOL,
                    expected=min(errs_nomask[L] for L in (2, 3, 4))),
        ],
        details={"relative error vs GD(A^T)": errs, "symmetric A, GD(A)": errs_sym,
                 "GD(A) untransposed": errs_untransposed, "no mask": errs_nomask,
                 "Sigma eigenvalues": np.linalg.eigvalsh(Sigma), "prompts": batch, "n": n},
    )


# =====================================================================================
# Single-layer reduction (App. A.1)
# =====================================================================================
@check("preconditioned_gd.forward.single_layer_reduction",
       covers=["preconditioned_gd.forward.single_layer_output"], method="monte_carlo",
       title="App. A.1: one layer's output is b^T G A x_q; other blocks of P, Q are irrelevant",
       settings=_SETTINGS)
def single_layer_reduction(ctx):
    """Eqs. 13-14: ``[Z_1]_{d+1,n+1} = b^T G A x_q``.

    ``b^T`` is the last row of ``P``, ``A`` the first ``d`` columns of ``Q`` ((d+1) x d),
    ``G = (1/n) sum_{i<=n} z_i z_i^T = [[S, h], [h^T, (1/n) sum y_i^2]]``. Random full
    ``P, Q``; then the first ``d`` rows of ``P`` and the last column of ``Q`` are redrawn and
    the output must not change. The record ``preconditioned_gd.forward.single_layer_output``
    (the moment form, in ``S``, ``w*``, ``x_q``) is evaluated on the first
    :data:`RECORD_PROMPTS` prompts. Controls: the reduced formula and the record with ``Q^T``
    in place of ``Q``, and (the reduction is specific to one layer) redrawing the same blocks at
    ``L = 2``. Seeds 0-19 (quick): all pass, worst relative error 1.2e-15 (tolerance 1e-12);
    the controls' smallest relative error 0.48. Full profile (50000 prompts), seeds 0-2: all
    pass, worst 1.4e-15.
    """
    from verify.models.linear_transformer import forward

    n, batch = ctx.setting("n"), ctx.setting("samples")
    Sigma, prompts = _setup(ctx, n, batch)
    d = prompts.d
    Z0 = prompts.tokens()
    rng = ctx.rng
    P = rng.standard_normal((1, d + 1, d + 1))
    Q = rng.standard_normal((1, d + 1, d + 1))
    out = forward(Z0, P, Q)[:, d, n]
    Zc = Z0[:, :, :n]
    G = np.einsum("bki,bli->bkl", Zc, Zc) / n
    x_q = prompts.query
    b = P[0, d, :]
    reduced = np.einsum("k,bkl,lj,bj->b", b, G, Q[0, :, :d], x_q)
    reduced_T = np.einsum("k,bkl,lj,bj->b", b, G, Q[0].T[:, :d], x_q)
    # blocks that must not matter for L = 1
    P2, Q2 = P.copy(), Q.copy()
    P2[0, :d, :] = rng.standard_normal((d, d + 1))
    Q2[0, :, d] = rng.standard_normal(d + 1)
    out2 = forward(Z0, P2, Q2)[:, d, n]
    # G from the sampled S, h (checks the block form of G too)
    S, h = prompts.S, prompts.h
    y2 = np.mean(prompts.y[:, :n] ** 2, axis=1)
    Gb = np.zeros_like(G)
    Gb[:, :d, :d], Gb[:, :d, d], Gb[:, d, :d], Gb[:, d, d] = S, h, h, y2
    # L = 2: the same blocks now matter
    PL = rng.standard_normal((2, d + 1, d + 1)) * 0.5
    QL = rng.standard_normal((2, d + 1, d + 1)) * 0.5
    PL2, QL2 = PL.copy(), QL.copy()
    PL2[0, :d, :] = rng.standard_normal((d, d + 1)) * 0.5
    QL2[0, :, d] = rng.standard_normal(d + 1) * 0.5
    two = forward(Z0, PL, QL)[:, d, n]
    two2 = forward(Z0, PL2, QL2)[:, d, n]
    # the registered moment form, per prompt (and with Q^T's blocks: control)
    rec = theory.get("preconditioned_gd.forward.single_layer_output")
    k = min(batch, RECORD_PROMPTS)

    def record(Qm):
        return np.array([rec(S=S[i], w=prompts.w[i], x_q=x_q[i], b_x=b[:d], b_y=b[d], A_x=Qm[:d, :d],
                             a_y=Qm[d, :d]) for i in range(k)])

    rec_out, rec_T = record(Q[0]), record(Q[0].T)
    errs = {"forward vs b^T G A x_q": _rel(out, reduced),
            "redrawn irrelevant blocks": _rel(out2, out),
            "G = [[S, h], [h^T, mean y^2]]": _rel(G, Gb),
            "forward vs the record single_layer_output": _rel(rec_out, out[:k])}
    worst = max(errs.values())
    return Outcome(
        measured=errs, predicted=0.0, discrepancy=worst, tolerance=ROUNDOFF_RTOL,
        criterion=(f"largest relative error over 4 identities on {batch} prompts (the record on "
                   f"the first {k}; d={d}, n={n}, random full P, Q) <= {ROUNDOFF_RTOL:g}: exact "
                   "algebra, float64 round-off only"),
        # exact algebra on fixed inputs (no sampling): expected = the gap of the wrong closed form
        # from the true one (b^T G A^T x_q vs b^T G A x_q), and for L = 2 the statistic itself
        controls=[Control("reduced formula with Q^T in place of Q", _rel(reduced_T, out),
                          ROUNDOFF_RTOL, expected=_rel(reduced_T, reduced)),
                  Control("the record single_layer_output with Q^T's blocks", _rel(rec_T, out[:k]),
                          ROUNDOFF_RTOL, expected=_rel(reduced_T[:k], reduced[:k])),
                  Control("L = 2: redrawing the first d rows of P_0 and last column of Q_0",
                          _rel(two2, two), ROUNDOFF_RTOL, expected=_rel(two2, two))],
        details={**errs, "prompts": batch},
    )


# =====================================================================================
# Lemmas 5 and 6 (App. C.2)
# =====================================================================================
@check("preconditioned_gd.forward.lemmas_5_6",
       covers=["preconditioned_gd.forward.residual_operator", "preconditioned_gd.forward.covariance_step"],
       method="monte_carlo",
       title="App. C.2, Lemmas 5-6 and eqs. 25, 34, 57: the query label enters additively; the label "
             "row and the context covariance in moment form",
       settings=_SETTINGS)
def lemmas_5_6(ctx):
    """Lemmas 5, 6 and eqs. 25, 34, 57 under the general form (eq. 11), L = 3.

    ``Zbar_0`` is ``Z_0`` with the true ``y_q`` in the query slot. Lemma 6: ``X_l`` and the
    context entries of ``Y_l`` are the same for ``Z_0`` and ``Zbar_0``, and ``[Ybar_l]_{n+1} =
    [Y_l]_{n+1} + y_q``. Lemma 5 (per prompt): ``(TF_L - y_q)^2 = [Ybar_L]_{n+1}^2 =
    Tr((I - M) Ybar_L^T Ybar_L (I - M))``. Eq. 25 (sparse, eq.-11 sign, ``1/n`` explicit):
    ``Ybar_L = w*^T X_0 prod_l (I + M X_0^T A_l X_0 / n)``. The records in moment form, on each
    prompt's context covariance ``S`` (one stacked call): ``residual_operator`` gives
    ``y_q - TF_L = [Ybar_L]_{n+1} = x_q^T R w*`` (eq. 11, and ``B_l = 0``: eq. 25), and
    ``covariance_step`` maps the context covariance of layer ``l`` to that of layer ``l + 1``
    (eqs. 34, 57; ``S_l`` read from the forward pass's covariate rows). Controls: a generic full
    ``P, Q`` (nonzero last row of ``Q``) breaks Lemma 6; eq. 25 without the mask fails; the record
    ``R`` with the layers in reverse order (eq.-11 layers do not commute) fails; the sparse form's
    ``X_l = X_0`` (covariance unchanged) fails under eq. 11. Seeds 0-19 (quick): all pass, worst
    relative error 2.1e-14 (tolerance 1e-12); the controls' smallest relative errors 1.4e-3 (the
    label leak of generic P, Q), 0.12 (no mask), 0.85 (layers reversed), 0.89 (X_l = X_0). Full profile (50000 prompts),
    seeds 0-2: all pass, worst 1.9e-15.
    """
    from verify.models.linear_transformer import forward, general_layers, sparse_layers

    n, batch = ctx.setting("n"), ctx.setting("samples")
    Sigma, prompts = _setup(ctx, n, batch)
    d, L = prompts.d, 3
    rng = ctx.rng
    w, V = np.linalg.eigh(Sigma)
    S_mhalf = V @ np.diag(w ** -0.5) @ V.T
    A = np.einsum("ij,ljk,km->lim", S_mhalf, _random_layers(rng, L, d, 0.5), S_mhalf)
    B = np.eye(d) + _random_layers(rng, L, d, 0.3)
    P, Q = general_layers(A, B)
    Z0 = prompts.tokens()
    y_q = prompts.target
    Zbar0 = Z0.copy()
    Zbar0[:, d, n] = y_q
    Zs = forward(Z0, P, Q, return_all=True)
    Zbs = forward(Zbar0, P, Q, return_all=True)
    scale = np.max(np.abs(Zs))
    e_x = float(np.max(np.abs(Zs[:, :, :d, :] - Zbs[:, :, :d, :])) / scale)
    e_ctx = float(np.max(np.abs(Zs[:, :, d, :n] - Zbs[:, :, d, :n])) / scale)
    e_add = float(np.max(np.abs(Zbs[:, :, d, n] - Zs[:, :, d, n] - y_q)) / scale)
    # Lemma 5, per prompt
    tf = -Zs[-1][:, d, n]
    Yb = Zbs[-1][:, d, :]
    IM = np.zeros(n + 1)
    IM[n] = 1.0
    tr_form = np.einsum("bi,bi->b", Yb * IM, Yb * IM)
    sq = (tf - y_q) ** 2
    e5 = max(_rel(Yb[:, n] ** 2, sq), _rel(tr_form, sq))
    # eq. 25 under the sparse form with the eq.-11 sign (Q = +[[A, 0], [0, 0]])
    Ps, _ = sparse_layers(A)
    Qs = -sparse_layers(A)[1]
    Ybar_fwd = forward(Zbar0, Ps, Qs)[:, d, :]
    X0 = prompts.X
    M = np.diag(np.r_[np.ones(n), 0.0])
    row = np.einsum("bd,bdi->bi", prompts.w, X0)
    row_nomask = row.copy()
    for Al in A:
        K = np.einsum("bdi,de,bej->bij", X0, Al, X0) / n
        row = row + np.einsum("bi,ij,bjk->bk", row, M, K)
        row_nomask = row_nomask + np.einsum("bi,bik->bk", row_nomask, K)
    e25 = _rel(row, Ybar_fwd)
    # control: generic P, Q (the query label leaks into the scores)
    Pg = rng.standard_normal((L, d + 1, d + 1)) * 0.3
    Qg = rng.standard_normal((L, d + 1, d + 1)) * 0.3
    Zg = forward(Z0, Pg, Qg, return_all=True)
    Zgb = forward(Zbar0, Pg, Qg, return_all=True)
    leak = float(max(np.max(np.abs(Zg[:, :, :, :n] - Zgb[:, :, :, :n])),
                     np.max(np.abs(Zgb[:, :, d, n] - Zg[:, :, d, n] - y_q))) / np.max(np.abs(Zg)))
    # the records in moment form, on every prompt's context covariance (stacked calls)
    S0 = prompts.S

    def residual(As, Bs):
        R = _cf("preconditioned_gd.forward.residual_operator", S=S0, A_0=As[0], A_1=As[1], A_2=As[2],
                B_0=Bs[0], B_1=Bs[1])
        return np.einsum("bi,bij,bj->b", prompts.query, R, prompts.w)

    res = residual(A, B)
    res_sparse = residual(A, np.zeros_like(B))
    res_reversed = residual(A[::-1], B[::-1])
    X_l = [Z[:, :d, :n] for Z in Zs]
    S_l = [np.einsum("bdi,bei->bde", X, X) / n for X in X_l]
    S_next = [_cf("preconditioned_gd.forward.covariance_step", S=S_l[l], A=A[l], B=B[l]) for l in range(L)]
    e_cov = max(_rel(S_next[l], S_l[l + 1]) for l in range(L))
    errs = {"Lemma 6: X_l unchanged": e_x, "Lemma 6: context Y_l unchanged": e_ctx,
            "Lemma 6: [Ybar_l]_{n+1} = [Y_l]_{n+1} + y_q": e_add,
            "Lemma 5: (TF - y_q)^2 = [Ybar_L]_{n+1}^2 = Tr(...)": e5,
            "eq. 25 product form": e25,
            "residual_operator: x_q^T R w* = y_q - TF_L (eq. 11)": _rel(res, y_q - tf),
            "residual_operator: x_q^T R w* = [Ybar_L]_{n+1} (eq. 11)": _rel(res, Yb[:, n]),
            "residual_operator, B_l = 0: = [Ybar_L]_{n+1} of the sparse form (eq. 25)":
                _rel(res_sparse, Ybar_fwd[:, n]),
            "covariance_step: S_{l+1} from S_l, l = 0..L-1 (eqs. 34, 57)": e_cov}
    return Outcome(
        measured=errs, predicted=0.0, discrepancy=max(errs.values()), tolerance=ROUNDOFF_RTOL,
        criterion=(f"largest relative error over {len(errs)} identities on {batch} prompts (d={d}, n={n}, "
                   f"L={L}, eq. 11 with random A_l, B_l) <= {ROUNDOFF_RTOL:g}: exact algebra "
                   "(App. C.2 uses no moment identities), float64 round-off only"),
        # exact algebra on fixed inputs (no sampling): expected = the leak itself, and the gap of
        # each wrong closed form from the true one (unmasked product form, layers reversed,
        # covariance unchanged)
        controls=[Control("Lemma 6 for generic full P, Q (not of the form eq. 11)", leak,
                          ROUNDOFF_RTOL, expected=leak),
                  Control("eq. 25 without the mask M", _rel(row_nomask, Ybar_fwd), ROUNDOFF_RTOL,
                          expected=_rel(row_nomask, row)),
                  Control("residual_operator with the layers in reverse order", _rel(res_reversed, y_q - tf),
                          ROUNDOFF_RTOL, expected=_rel(res_reversed, res)),
                  Control("the sparse form's X_l = X_0 under eq. 11 (S_{l+1} = S_l)",
                          max(_rel(S_l[l], S_l[l + 1]) for l in range(L)), ROUNDOFF_RTOL,
                          expected=max(_rel(S_l[l], S_next[l]) for l in range(L)))],
        details={**errs, "prompts": batch},
    )


# =====================================================================================
# Lemma 4 (App. B.4)
# =====================================================================================
@check("preconditioned_gd.forward.lemma4_permutation",
       covers=["preconditioned_gd.forward.residual_operator"], method="monte_carlo",
       title="Lemma 4: on A_l = a_l Sigma^{-1} the output is invariant under permuting a_l",
       settings=_SETTINGS)
def lemma4_permutation(ctx):
    """Lemma 4 (App. B.4): on the set ``A_l = a_l Sigma^{-1}`` the layers commute.

    ``TF_L = <x_q, w_L>`` with ``w_L = (I - prod_l (I - a_l Sigma^{-1} S)) w*``, symmetric in
    the ``a_l``; so every per-prompt output is invariant under the ``L!`` permutations of
    ``(a_0, .., a_{L-1})`` (L = 3, 4, random ``a_l`` of order one). At ``L = 3`` the record
    ``preconditioned_gd.forward.residual_operator`` (sparse form: ``B_l = 0``, eq.-11 sign
    ``A_l = -a_l Sigma^{-1}``) gives each permutation's ``y_q - TF_3 = x_q^T R w*`` per prompt
    and must be invariant too. Control: generic non-commuting ``A_l`` (random, non-symmetric)
    change under the same permutations, in the forward pass and in the record. Seeds 0-19
    (quick): all pass, worst relative error 1.1e-14 (tolerance 1e-12); the controls' smallest
    relative change 0.19 (forward pass) and 0.17 (record). Full profile (50000 prompts), seeds
    0-2: all pass, worst 5.1e-15.
    """
    from verify.models.linear_transformer import predict, sparse_layers

    n, batch = ctx.setting("n"), ctx.setting("samples")
    Sigma, prompts = _setup(ctx, n, batch)
    d = prompts.d
    Z0 = prompts.tokens()
    Sigma_inv = np.linalg.inv(Sigma)
    w, V = np.linalg.eigh(Sigma)
    S_mhalf = V @ np.diag(w ** -0.5) @ V.T
    errs, ctrl = {}, {}
    for L in (3, 4):
        a = ctx.rng.uniform(0.2, 1.5, L)
        A_gen = np.einsum("ij,ljk,km->lim", S_mhalf, _random_layers(ctx.rng, L, d, 0.5), S_mhalf)
        base = predict(Z0, *sparse_layers(a[:, None, None] * Sigma_inv))
        base_gen = predict(Z0, *sparse_layers(A_gen))
        e, c = 0.0, np.inf
        for perm in itertools.permutations(range(L)):
            if perm == tuple(range(L)):
                continue
            p = list(perm)
            e = max(e, _rel(predict(Z0, *sparse_layers(a[p, None, None] * Sigma_inv)), base))
            c = min(c, _rel(predict(Z0, *sparse_layers(A_gen[p])), base_gen))
        errs[L], ctrl[L] = e, c
    # the record: R at A_l = -a_l Sigma^{-1} (eq.-11 sign, B_l = 0), per prompt, every permutation
    a = ctx.rng.uniform(0.2, 1.5, 3)
    A_gen = np.einsum("ij,ljk,km->lim", S_mhalf, _random_layers(ctx.rng, 3, d, 0.5), S_mhalf)
    zeros = np.zeros((d, d))

    def residual(As):
        R = _cf("preconditioned_gd.forward.residual_operator", S=prompts.S, A_0=As[0], A_1=As[1], A_2=As[2],
                B_0=zeros, B_1=zeros)
        return np.einsum("bi,bij,bj->b", prompts.query, R, prompts.w)

    base = residual(-a[:, None, None] * Sigma_inv)
    base_gen = residual(-A_gen)
    e_rec = _rel(base, prompts.target - predict(Z0, *sparse_layers(a[:, None, None] * Sigma_inv)))
    c_rec = np.inf
    for perm in itertools.permutations(range(3)):
        if perm != (0, 1, 2):
            p = list(perm)
            e_rec = max(e_rec, _rel(residual(-a[p, None, None] * Sigma_inv), base))
            c_rec = min(c_rec, _rel(residual(-A_gen[p]), base_gen))
    errs["record, L=3"], ctrl["record, L=3"] = e_rec, c_rec
    return Outcome(
        measured={f"L={L}": errs[L] for L in errs}, predicted=0.0,
        discrepancy=max(errs.values()), tolerance=ROUNDOFF_RTOL,
        criterion=(f"max over every non-trivial permutation (L = 3, 4) of max|TF(perm) - TF| / "
                   f"max|TF| on {batch} prompts, and (L = 3) of the record's x_q^T R w* against "
                   f"the unpermuted one and against y_q - TF_3, <= {ROUNDOFF_RTOL:g}: the products "
                   "commute exactly, float64 round-off only"),
        # exact algebra on fixed inputs (no sampling): the statistic is its own expected value
        controls=[Control("generic non-commuting A_l: smallest change over permutations",
                          min(v for k, v in ctrl.items() if k != "record, L=3"), ROUNDOFF_RTOL,
                          expected=min(v for k, v in ctrl.items() if k != "record, L=3")),
                  Control("the record residual_operator at generic A_l: smallest change over "
                          "permutations", c_rec, ROUNDOFF_RTOL, expected=c_rec)],
        details={"invariance error": errs, "generic A_l change": ctrl, "prompts": batch},
    )


# =====================================================================================
# Eqs. 14-15: the loss of any single layer (App. A.1)
# =====================================================================================
#: The configuration of ``mc_reduced_loss``: a strongly anisotropic 3 x 3 spectrum, a short
#: context, Theorem 1's data model (w* ~ N(0, I)).
REDUCED_EIGENVALUES, REDUCED_N = (2.0, 0.5, 0.1), 6

#: Random full (P, Q) per run, and the scale of their entries.
REDUCED_POINTS, REDUCED_SCALE = 3, 0.5


def _reduced_blocks(P, Q) -> dict:
    """The arguments of ``reduced_loss`` read off one layer: ``b`` = the last row of ``P``,
    ``A`` = the first ``d`` columns of ``Q`` (eq. 14)."""
    d = P.shape[0] - 1
    return {"b_x": P[d, :d], "b_y": float(P[d, d]), "A_x": Q[:d, :d], "a_y": Q[d, :d]}


@check("preconditioned_gd.forward.mc_reduced_loss",
       covers=["preconditioned_gd.forward.reduced_loss"], method="monte_carlo",
       title="Eqs. 14-15 by Monte Carlo: one layer with full random P, Q has the loss f(b, A) of the "
             "last row of P and the first d columns of Q",
       settings=[Setting("samples", "int", quick=60_000, full=2_000_000, low=1000, high=10**9,
                         doc="sampled prompts (shared by the random layers)")])
def mc_reduced_loss(ctx):
    """Eqs. 14-15: ``f(P, Q) = f(b, A)`` for every single layer (Theorem 1's data model).

    ``d = 3``, ``n = 6``, ``Sigma`` with eigenvalues (2, 0.5, 0.1) and a Haar rotation,
    ``w* ~ N(0, I)``. :data:`REDUCED_POINTS` layers with every entry of ``P, Q`` drawn
    ``N(0, 0.5^2)`` (the blocks that eq. 14 drops included) run through the real forward pass
    (eqs. 2-4) on the same prompts; the mean of ``([Z_1]_{d+1,n+1} + y_q)^2`` is compared with
    ``preconditioned_gd.forward.reduced_loss`` at ``(b, A)`` (z-test, family-wise threshold over
    the layers). Controls, the largest |z| over the layers: the record with the blocks read
    from ``Q^T`` (a transposed convention), and the sparse slice ``single_layer.loss`` at
    ``A = -b_y A_x`` (dropping ``b_x`` and ``a_y``: only the preconditioner block would
    matter). The per-prompt loss has terms of eighth order in the Gaussians (``w*`` four times),
    so it is heavy-tailed; the standard errors are those of the sample. Seeds 0-19 (quick, 60000
    prompts, 2-3.5 s): all pass, worst |z| 1.7 (threshold 5.1); the controls' smallest largest-|z|
    12 (Q^T) and 21 (sparse slice), their expected values at least 12.5 and 20.4. Full profile
    (2000000 prompts), seeds 0-2: all pass, worst |z| 1.7; controls at |z| >= 123.
    """
    from verify.models.linear_transformer import forward
    from verify.tasks.preconditioned_gd import distorted_covariance, sample_prompts

    rng = ctx.rng
    Sigma = distorted_covariance(rng, REDUCED_EIGENVALUES)
    n, d, total = REDUCED_N, len(REDUCED_EIGENVALUES), ctx.setting("samples")
    layers = [(rng.standard_normal((d + 1, d + 1)) * REDUCED_SCALE,
               rng.standard_normal((d + 1, d + 1)) * REDUCED_SCALE) for _ in range(REDUCED_POINTS)]
    est = batch_mean()
    for k in chunks(total, 50_000):
        pr = sample_prompts(rng, Sigma, n, k, task="identity")
        Z0 = pr.tokens()
        est.add(np.stack([(forward(Z0, P[None], Q[None])[:, d, n] + pr.target) ** 2 for P, Q in layers],
                         axis=1))
    r = est.result()
    f = np.array([_cf("preconditioned_gd.forward.reduced_loss", Sigma=Sigma, n=n, **_reduced_blocks(P, Q))
                  for P, Q in layers])
    f_T = np.array([_cf("preconditioned_gd.forward.reduced_loss", Sigma=Sigma, n=n, **_reduced_blocks(P, Q.T))
                    for P, Q in layers])
    f_sparse = np.array([_cf("preconditioned_gd.single_layer.loss", Sigma=Sigma, n=n, A=-P[d, d] * Q[:d, :d])
                         for P, Q in layers])
    z = (r.mean - f) / r.se
    z_crit = z_threshold(len(layers))
    # expected: each wrong closed form's gap from the true one over the measured s.e.
    controls = [Control("reduced_loss with the blocks read from Q^T: max |z| over the layers",
                        float(np.max(np.abs(r.mean - f_T) / r.se)), z_crit,
                        expected=float(np.max(np.abs(f_T - f) / r.se))),
                Control("the sparse slice single_layer.loss(A = -b_y A_x) (b_x, a_y dropped): max |z|",
                        float(np.max(np.abs(r.mean - f_sparse) / r.se)), z_crit,
                        expected=float(np.max(np.abs(f_sparse - f) / r.se)))]
    return Outcome(
        measured=r.mean.tolist(), predicted=f.tolist(), discrepancy=float(np.max(np.abs(z))),
        tolerance=z_crit,
        criterion=(f"max |z| over {len(layers)} random full layers (every entry of P, Q drawn N(0, "
                   f"{REDUCED_SCALE}^2)) of the MC loss of the forward pass ({total} prompts, d={d}, "
                   f"n={n}) against reduced_loss(b, A) < z_threshold({len(layers)}) = {z_crit:.2f}"),
        controls=controls,
        details={"Sigma eigenvalues": np.linalg.eigvalsh(Sigma), "s.e.": r.se.tolist(), "z": z.tolist(),
                 "reduced_loss with Q^T": f_T.tolist(), "single_layer.loss slice": f_sparse.tolist(),
                 "prompts": total},
    )
