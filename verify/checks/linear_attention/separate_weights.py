"""Minimal-norm weights learned by separate key/query linear attention ATTN_S (Zhang, Singh,
Latham, Saxe 2025, §4.3 eq. 20a, App. E.7 eqs. 77-82).

From a small initialisation the exact gradient flow (eqs. 14, 83) ends at a global minimum
``sum_i v_i k_i q_i^T = M*`` whose weights are the minimal-l2-norm factorisation of App. E.7:
one head per eigen-direction with ``k_i = q_i = v_i e_d``, ``|v_i| = v*_d = (lambda_d/a_d)^{1/3}``
(eq. 20a = eq. 81 with mu_d = lambda_d / a_d), cost ``3 sum_d (v*_d)^2``. The start leaves
an O(w_init^2) trace: the conserved imbalances of eq. 82 (``|k|^2 - |q|^2``, ``|k|^2 - v^2``)
are O(w_init^2), the unused head keeps an O(w_init) weight, and the learned heads keep
O(w_init) components off their direction (1 - cos = O(w_init^2)). The leading-order flow near
the origin is homogeneous (the weights enter G only through the cubic M), so scaling one
normalised draw by w_init scales these traces by w_init^2: the deviations at two scales
w_1 > w_2 have ratio (w_1/w_2)^2 (100 at the defaults) up to a relative O(w_init / v*) correction.

The sizes are named settings (``python -m verify settings linear_attention.separate.min_norm_weights``):
``w_init`` (the two scales), ``H`` (heads) and ``N`` (context length); the expected
log10 of the deviation ratio, 2 log10(w_1/w_2), follows ``w_init``.

Contains
--------
``linear_attention.separate.min_norm_weights``  H = 5, D = 4, eq.-36 draw scaled to
                                                w_init = 1e-4, 1e-5 (defaults): deviations scale
                                                as w_init^2 (at 1e-2 some draws are not yet in
                                                that regime)
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.flows import separate as fs
from verify.flows.separate import deviations, rotated_pair
from verify.settings import Setting
from verify.tasks.in_context_regression import random_covariance

#: Fig.-1 spectrum and context length.
SPECTRUM = (0.4, 0.3, 0.2, 0.1)
N_FIG = 31
TAU = 1.0
RTOL = 1e-10
#: allowed |log10(deviation ratio) - 2 log10(w_1/w_2)|: a relative next-order term K w_init / v* (v* >= 1.3);
#: 0.05 admits K up to ~15 at w_init = 1e-2 and far more at the scales used here (an estimate,
#: not a derived bound; the escape-time analogue has K = 1.25)
LOG_TOL = 0.05
#: flow end: 20 escape scales tau / (lambda_D^2 w_init) of the slowest direction (eq. 71)
T_ESCAPES = 20.0


def _vstar(lam, N):
    cf = theory.get("linear_attention.separate.ansatz_value_weight")
    return np.array([float(cf(lam=x, trLambda=float(np.sum(lam)), N=N)) for x in lam])


@check("linear_attention.separate.min_norm_weights",
       covers=["linear_attention.separate.ansatz_value_weight"],
       method="exact_flow",
       title="Weights learned from small init are the minimal-norm factorisation of M* (eqs. 20a, 80-81): "
             "deviations scale as w_init^2 (H = 5, D = 4, Fig.-1 spectrum, N = 31)",
       settings=[Setting("w_init", "floats", quick=(1e-4, 1e-5), full=(1e-4, 1e-5), low=1e-9, high=0.1,
                         doc="the two scales w_1 > w_2 of one eq.-36 draw (deviation ratio (w_1/w_2)^2)",
                         sweep=(1e-3, 1e-4, 1e-5, 1e-6)),
                 Setting("H", "int", quick=5, full=5, low=len(SPECTRUM), high=64,
                         doc="heads H (at least D = 4: one per eigen-direction)"),
                 Setting("N", "int", quick=N_FIG, full=N_FIG, low=1, high=10**6, doc="context length N")])
def min_norm_weights(ctx):
    scales = tuple(ctx.setting("w_init"))
    if len(scales) != 2 or not scales[0] > scales[1]:
        raise ValueError(f"w_init: expected two scales w_1 > w_2, got {scales}")
    H, N = ctx.setting("H"), ctx.setting("N")
    # the w^2 law: log10 of the deviation ratio (2 at the defaults, ratio 100); the w^1 law: half of it
    log_scale = float(np.log10(scales[0] / scales[1]))
    log_expected = 2 * log_scale
    rng = ctx.rng
    Lam = random_covariance(rng, SPECTRUM)
    mo = fs.moments(Lam, N)
    lam, E = fs.eigenbasis(mo)
    D = lam.size
    v_star = _vstar(lam, N)
    v1, k1, q1 = fs.init_separate(rng, H, 1, D, 1.0)     # one normalised draw (eq. 36)
    res, finals = [], []
    for w in scales:
        T = T_ESCAPES * TAU / (lam[-1] ** 2 * w)
        r = fs.integrate(mo, None, w * v1, w * k1, w * q1, tau=TAU, t_eval=np.array([0.0, T]),
                         rtol=RTOL, method="LSODA")
        v, k, q = r.v[-1], r.k[-1][:, 0], r.q[-1][:, 0]
        G = mo.L2 - mo.A @ r.M[-1] @ mo.Lambda
        dv = deviations(v, k, q, E, v_star)
        dv["max|G|"] = float(np.max(np.abs(G)))
        res.append(dv)
        finals.append((v, k, q))
    keys = ("weights", "norm_excess", "misalignment")
    big, small = res
    ratio = {key: big[key] / small[key] if small[key] > 0 else np.inf for key in keys}
    logdev = {key: abs(np.log10(ratio[key]) - log_expected) if np.isfinite(ratio[key]) and ratio[key] > 0
              else np.inf for key in keys}
    C = {key: big[key] / scales[0] ** 2 for key in keys}
    bound_small = {key: C[key] * scales[1] ** 2 for key in keys}
    same_heads = big["heads"] == small["heads"] and big["distinct"] and small["distinct"]
    disc = max(logdev.values()) / LOG_TOL
    # negative controls at the smaller scale, against the bound C w^2 (C from the larger scale)
    v, k, q = finals[1]
    h = small["heads"]
    limit = bound_small["norm_excess"] * 10 ** LOG_TOL
    vr, kr, qr = rotated_pair(v, k, q, h[0], h[1], np.pi / 4)
    M0 = fs.effective_matrix(v, k[:, None], q[:, None])
    M_rot = fs.effective_matrix(vr, kr[:, None], qr[:, None])
    ex_rot = deviations(vr, kr, qr, E, v_star)["norm_excess"]
    vu, ku, qu = v.copy(), k.copy(), q.copy()
    vu[h[0]] *= 2
    ku[h[0]] /= np.sqrt(2)
    qu[h[0]] /= np.sqrt(2)
    ex_unb = deviations(vu, ku, qu, E, v_star)["norm_excess"]
    lin = min(abs(np.log10(ratio[key]) - log_scale) for key in keys) / LOG_TOL
    # expected control statistics: the same perturbations of the exact minimal-norm factorisation
    # (eq. 20a: head h[d] with v = v*_d, k = q = v*_d e_d, the other heads 0), whose excess is 0
    vi, ki = np.zeros(H), np.zeros((H, D))
    for d, i in enumerate(h):
        vi[i], ki[i] = v_star[d], v_star[d] * E[:, d]
    e_rot = deviations(*rotated_pair(vi, ki, ki.copy(), h[0], h[1], np.pi / 4), E, v_star)["norm_excess"] / limit
    vu_i, ku_i = vi.copy(), ki.copy()
    vu_i[h[0]] *= 2
    ku_i[h[0]] /= np.sqrt(2)
    e_unb = deviations(vu_i, ku_i, ku_i.copy(), E, v_star)["norm_excess"] / limit
    e_lin = abs(log_expected - log_scale) / LOG_TOL   # the w^2 law against the w^1 law
    return Outcome(
        measured={"ratio deviation(larger w) / deviation(smaller w)": ratio,
                  "larger w_init": big, "smaller w_init": small},
        predicted={"ratio": (scales[0] / scales[1]) ** 2, "v_star": v_star.tolist(),
                   "min-norm cost 3 sum v*^2": float(3 * np.sum(v_star**2))},
        discrepancy=float(disc), tolerance=1.0,
        passed=bool(disc <= 1.0 and same_heads),
        criterion=f"same eq.-36 draw scaled to w_init = {scales[0]:g}, {scales[1]:g}, flow to "
                  "t = 20 tau/(lambda_D^2 w_init) "
                  "(LSODA rtol 1e-10): each direction learned by one distinct head (same heads at both "
                  "scales), and each deviation (i) max | |v|, |k|, |q| - v*_d | (eq. 20a), (ii) norm - "
                  f"3 sum v*^2 (eq. 81), (iii) 1 - |cos(k, e_d)| has |log10(ratio) - {log_expected:g}| <= "
                  f"{LOG_TOL} (2 log10(w_1/w_2); H = {H}, N = {N}), i.e. equals C w_init^2 at the smaller "
                  "scale with C measured at the larger "
                  "within 12 %: the "
                  "eq.-82 imbalances and the off-direction residues are O(w_init^2) with a relative "
                  "next-order term O(w_init / v*) (allowed K <= ~15)",
        controls=[Control("balanced non-minimal factorisation (two heads rotated by pi/4 in their span, "
                          "same M): norm excess / (C w^2 * 10^tol)", ex_rot / limit, 1.0, expected=float(e_rot)),
                  Control("unbalanced head (v -> 2v, k, q -> /sqrt2, same M): norm excess / (C w^2 * 10^tol)",
                          ex_unb / limit, 1.0, expected=float(e_unb)),
                  Control(f"w_init^1 scaling (ratio {scales[0] / scales[1]:g}): "
                          f"min |log10 ratio - {log_scale:g}| / tol", float(lin), 1.0,
                          expected=float(e_lin))],
        details={"C = deviation / w^2 at the larger w_init": C, "bound C w^2 at the smaller w_init": bound_small,
                 "rotated pair keeps M (max abs diff)": float(np.max(np.abs(M_rot - M0))),
                 "excess rotated": ex_rot, "excess unbalanced": ex_unb, "lambda": lam.tolist(),
                 "H": H, "w_init": list(scales)},
    )
