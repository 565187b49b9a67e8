"""Slips in the decoder part of Scan and Snap (Tian et al. 2023, §4 below eq. 7, App. D.2 eqs. 34-36), each decided
by computing the quantity.

Contains
--------
``scan_snap.decoder.eq7_input_limit``
    The decoder's input LN(X^T b_T) of a class tends to f_n = c_n/||c_n|| (Lemma 2), not to e_n/||e_n|| as printed
    below eq. 7: Monte Carlo over sampled sequences.
``scan_snap.decoder.eq35_first_step``
    The first decoder step from Y = 0: alpha_n(1) = 1/M on all M tokens and w_n(1) = eta_Y (e_n - 1/M) (eq. 36); eq.
    35 prints the update without eta_Y.
"""

from __future__ import annotations


import numpy as np

from verify import Control, Outcome, check
from verify.models.scan_snap import decoder_run, single_common
from verify.settings import Setting
from verify.stats import batch_mean, z_threshold


@check("scan_snap.decoder.eq7_input_limit", method="monte_carlo", covers=[],
       title="Below eq. 7: LN(X^T b_T) -> f_n = c_n/||c_n|| (Lemma 2), not e_n/||e_n||: Monte Carlo over sequences",
       refutes={"Tian et al. 2023, §4 below eq. 7 (f_n := X^T b_T/||X^T b_T|| -> e_n/||e_n||)":
                "The limit of the decoder's input is the normalised long-sequence attention c_n/||c_n|| (Lemma 2, "
                "eq. 6), a vector on the contextual tokens of class n; e_n is the one-hot of the next token, which "
                "is not a "
                "contextual token, so e_n/||e_n|| is at distance sqrt 2 from every such input."},
       settings=[Setting("T", "ints", quick=(101, 10001), full=(101, 1001, 10001, 100001), low=3, high=10**7,
                         doc="sequence lengths T"),
                 Setting("samples", "int", quick=400, full=4000, low=10, high=10**6, doc="sequences per T")])
def eq7_input_limit(ctx):
    """Classes single_common(3, 5) (one common token, five distinct per class) with query logits z ~ N(0, 0.5^2): for
    each T, R sequences of class 0 (T - 1 contextual tokens i.i.d. from P(.|0)), the attention b_T = softmax_t(z_{x_t})
    and the input LN(X^T b_T); the mean squared distance D(T) = E||LN(X^T b_T) - f_0||^2 with its standard error.

    Criterion: the one-sided upper bound D(T) + z SE (z = z_threshold(#T), family-wise 1e-6) at the largest T is below
    100/(T - 1) (the delta method gives (T - 1) D -> a constant of order tr Sigma / ||c||^2, about 3 here), and D
    falls with T (D at the largest T below D at the smallest minus z SE). Control: the printed limit e_n/||e_n||, whose
    distance to every input is sqrt 2 (squared 2, against 0.01 at T = 10001).

    Measured (quick, seeds 0-19): pass 20/20; (T - 1) D(T) = 2.9-3.1 at T = 101 and 10001; control: squared distance
    2 exactly (about 200 x the bound). Under 1 s.
    """
    rng = ctx.rng
    cl = single_common(3, 5)
    P = cl.P[0]
    sup = np.flatnonzero(P > 0)
    z = np.zeros(cl.M)
    z[sup] = 0.5 * rng.standard_normal(sup.size)
    c = P * np.exp(z)
    c /= c.sum()
    f = c / np.linalg.norm(c)
    Ts, R = list(ctx.setting("T")), ctx.setting("samples")
    thr = z_threshold(len(Ts))
    est, ctrl = {}, np.inf
    e_n = np.zeros(cl.M)
    e_n[cl.label[0]] = 1.0
    for T in Ts:
        acc, bad, d_f, d_e = batch_mean(), batch_mean(), [], []
        for _ in range(R):
            x = rng.choice(cl.M, size=T - 1, p=P)
            b = np.exp(z[x] - z[x].max())
            b /= b.sum()
            xb = np.bincount(x, weights=b, minlength=cl.M)
            ln = xb / np.linalg.norm(xb)
            d_f.append(np.sum((ln - f) ** 2))
            d_e.append(np.sum((ln - e_n) ** 2))
        acc.add(np.array(d_f))
        bad.add(np.array(d_e))
        est[T] = acc.result()
        ctrl = min(ctrl, float(bad.result().mean))
    T_hi, T_lo = Ts[-1], Ts[0]
    hi = est[T_hi]
    upper = float(hi.mean + thr * hi.se)
    bound = 100 / (T_hi - 1)
    falls = float(est[T_lo].mean - thr * est[T_lo].se) > upper
    stat = upper / bound + (0.0 if falls else 1.0)
    return Outcome(
        measured={f"(T-1) D(T) at T = {T}": float((T - 1) * e.mean) for T, e in est.items()},
        predicted="D(T) -> 0 like 1/T", discrepancy=float(stat), tolerance=1.0,
        criterion=f"upper bound D + z SE (z = {thr:.2f}) at T = {T_hi} over 100/(T - 1), plus 1 if D does not fall "
                  f"from T = {T_lo}; pass if <= 1",
        controls=[Control("printed limit e_n/||e_n||: squared distance / the same bound", ctrl / bound, 1.0,
                          expected=2.0 / bound)],
        details={"T": Ts, "D(T)": {str(T): float(e.mean) for T, e in est.items()},
                 "SE": {str(T): float(e.se) for T, e in est.items()}, "samples": R},
    )


@check("scan_snap.decoder.eq35_first_step", method="exact_flow", covers=["scan_snap.decoder.label_logit"],
       title="Eqs. 34-36: the first decoder step from Y = 0 has alpha_n(1) = 1/M on all M tokens and moves w_n by "
             "eta_Y (e_n - 1/M); eq. 35 omits eta_Y",
       refutes={"Tian et al. 2023, eqs. 34-35 (proof of Lemma 5, step 1)":
                "Eq. 34 states alpha_n(1) = 1/M 'for all j in [K]'; the softmax of w_n(0) = 0 is 1/M on all M tokens "
                "(j in [M]; the next tokens [K] are only some of them). Eq. 35 gives the change of w_n in the first "
                "step as "
                "1 - 1/M, -1/M without the learning rate: it is eta_Y (1 - 1/M), -eta_Y/M, as eq. 36's w_nj(1) shows."},
       settings=[Setting("eta_Y", "floats", quick=(0.1, 0.5, 3.0), full=(0.01, 0.1, 0.5, 1.5, 3.0), low=1e-6,
                         high=100.0, doc="learning rates (eta_Y != 1 separates eq. 35 from eq. 36)")])
def eq35_first_step(ctx):
    """For M in {5, 34, 1000}, a random nonnegative unit attention f and label n: one step of the single-class decoder
    (:func:`verify.models.scan_snap.decoder_run`) from Y = 0. Criterion: max over entries of |alpha(1) - 1/M| (all M
    entries) and of |w_n(1) - eta_Y (e_n - 1/M)| (relative) over 1e-14: exact arithmetic up to one rounding. Control:
    eq. 35's update without eta_Y, 1 - 1/M and -1/M, against the measured change: off by |1 - eta_Y| (1 - 1/M).

    Measured (quick, seeds 0-19): pass 20/20, errors <= 2e-16; control >= 0.5 relative (5e13 x the tolerance). Under
    0.1 s.
    """
    rng = ctx.rng
    err, ctrl, e_ctrl = 0.0, np.inf, np.inf
    for M in (5, 34, 1000):
        f = np.abs(rng.standard_normal(12))
        f /= np.linalg.norm(f)
        n = int(rng.integers(M))
        for eta in ctx.setting("eta_Y"):
            w, alpha = decoder_run(M, eta, 1, f, n)
            pred = -np.full(M, eta / M)
            pred[n] += eta
            err = max(err, float(np.abs(alpha[0] - 1 / M).max() * M), float(np.abs(w[1] - pred).max() / eta))
            printed = -np.full(M, 1 / M)
            printed[n] += 1.0
            ctrl = min(ctrl, float(np.abs(w[1] - printed).max() / np.abs(w[1]).max()))
            e_ctrl = min(e_ctrl, abs(1 - eta) / eta)
    return Outcome(
        measured={"max error": err}, predicted="alpha(1) = 1/M on [M]; w_n(1) = eta_Y (e_n - 1/M)",
        discrepancy=float(err / 1e-14), tolerance=1.0,
        criterion="max over M in {5, 34, 1000} and the learning rates of M |alpha_j(1) - 1/M| (all M entries) and "
                  "|w_n(1) - eta_Y (e_n - 1/M)|/eta_Y, over 1e-14 (one rounding of exact arithmetic)",
        controls=[Control("eq. 35's update without eta_Y: relative error / 1e-14", ctrl / 1e-14, 1.0,
                          expected=e_ctrl / 1e-14)],
        details={"M": [5, 34, 1000], "eta_Y": list(ctx.setting("eta_Y"))},
    )
