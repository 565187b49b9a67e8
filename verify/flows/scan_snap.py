"""The decoder dynamics of Tian, Wang, Chen, Du 2023 ("Scan and Snap") in closed arithmetic.

The class vectors ``zeta_n`` and their inner products (App. D.1), the weakly correlated
attention ``F`` and Theorem 1's decomposition of the decoder gradient in the basis ``F``
(eqs. 83-88, with eq. 70's ``Y`` or that of the iterated K-class decoder), the equal-overlap
attention and the batch decoder dynamics of Remark 1 (eqs. 7, 40-43), the continuous solution
``h(t)`` of Lemma 6 (numpy) and the time shift ``c(s)`` of Lemma 7 / Remark 2.
"""

from __future__ import annotations

import math

import numpy as np

import theory
from theory.scan_snap.h import h_continuous, trajectory
from verify.models.scan_snap import decoder_run
from verify.stats import evaluate as _cf

__all__ = ["h_numpy", "zeta", "q_values", "softmax", "weak_attention", "theorem1_coefficients", "iota_eq86",
           "beta_eq88", "eq88_trial", "equal_overlap_attention", "lemma5_case", "regime_errors", "decoder_rows",
           "time_shift"]


def h_numpy(t, M, eta):
    """The continuous ``h(t)`` of Lemma 6 (``scan_snap.h.continuous``) in numpy, elementwise in ``t``."""
    return h_continuous("numpy", np.asarray(t, dtype=float), M, eta)


def zeta(M: int) -> np.ndarray:
    """Rows zeta_n = M/(M-1) (e_n - 1/M) for n = 0..M-1 (App. D.1)."""
    return M / (M - 1) * (np.eye(M) - 1.0 / M)


def q_values(M: int) -> tuple[float, float]:
    """(q_1, q_0) = (zeta_i^T zeta_i, zeta_j^T zeta_i), App. D.1."""
    return 1 + 1 / (M - 1), -M / (M - 1) ** 2


def softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


# =====================================================================================
# Eq. 88
# =====================================================================================
def weak_attention(rng, M: int, K: int, overlap: float = 0.3) -> np.ndarray:
    """A nonnegative unit-column F (M x K): class n has its own distinct block and all classes
    share a few common tokens with small random weight (weakly correlated, full column rank)."""
    n_common = 3
    block = (M - n_common) // K
    F = np.zeros((M, K))
    for n in range(K):
        F[n_common + n * block:n_common + (n + 1) * block, n] = rng.uniform(0.5, 1.0, block)
        F[:n_common, n] = overlap * rng.uniform(0.0, 1.0, n_common)
    return F / np.linalg.norm(F, axis=0)


def theorem1_coefficients(F: np.ndarray, theta: np.ndarray, h: float, n: int):
    """Coefficients of g = Y(e_n - alpha_n) in the basis F, divided by gamma (1 + sigma).

    Y = F (I - E')(I + Theta) Wbar (eq. 70) with Wbar rows (M - 1) h zeta_k, so F^T Y =
    (I + Theta) Wbar and alpha_n = softmax(Y^T f_n) is the real softmax of w_n = (1 + theta_n)(M - 1) h
    zeta_n. gamma (1 + sigma) = (M - 1)^2 h/((M - 1) + exp(M h (1 + theta_n))) (eqs. 71, 85: the
    factor that e_n - alpha_n carries beyond zeta_n, times (M - 1) h).

    Returns (a, E', residual): a (K,) with g = gamma (1 + sigma) F a, E' = I - (I + E)^{-1}, and the
    relative residual of the least-squares fit (g lies in span F exactly).
    """
    M, K = F.shape
    E = F.T @ F - np.eye(K)
    Ep = np.eye(K) - np.linalg.inv(np.eye(K) + E)
    Wbar = (M - 1) * h * zeta(M)[:K]
    Y = F @ (np.eye(K) - Ep) @ np.diag(1 + theta) @ Wbar
    alpha = softmax(Y.T @ F[:, n])
    err = -alpha
    err[n] = np.sum(np.delete(alpha, n))    # 1 - alpha_n without cancellation (alpha_n -> 1 late)
    g = Y @ err
    a, *_ = np.linalg.lstsq(F, g, rcond=None)
    resid = float(np.linalg.norm(F @ a - g) / np.linalg.norm(g))
    scale = (M - 1) ** 2 * h / ((M - 1) + math.exp(M * h * (1 + theta[n])))
    return a / scale, Ep, resid


def iota_eq86(Ep, theta, M, n):
    """iota_n/(1 + sigma), eq. 86."""
    q1, q0 = q_values(M)
    others = [k for k in range(len(theta)) if k != n]
    return q1 * (1 + theta[n]) * (1 - Ep[n, n]) - q0 * sum((1 + theta[k]) * Ep[k, n] for k in others)


def beta_eq88(Ep, theta, M, n, m, printed: bool = False):
    """beta_nm/(1 + sigma), eq. 88; the q_0 (1 + theta_m) term enters with the corrected minus
    sign, or with the printed plus sign when ``printed``."""
    q1, q0 = q_values(M)
    sign = 1.0 if printed else -1.0
    others = [k for k in range(len(theta)) if k != n]
    return (q1 * (1 + theta[n]) * Ep[n, m] + sign * q0 * (1 + theta[m])
            + q0 * sum((1 + theta[k]) * Ep[k, m] for k in others))


def eq88_trial(rng, M: int, K: int):
    """One random draw of Theorem 1's decomposition from the decoder dynamics: ``F`` (:func:`weak_attention`),
    ``eta_Y`` log-uniform in [0.03, 1], ``N = K N-bar`` batch-1 steps of eq. 26 (``N-bar`` log-uniform in [20, 200],
    classes drawn uniformly) from ``Y = 0`` (:func:`verify.flows.scan_snap_kclass.kclass_decoder`), then ``g = Y (e_n
    - alpha_n)`` of the iterated ``Y`` for a random class ``n``, decomposed in ``F`` with ``theta_k =
    h*(N_k)/h*(N-bar) - 1`` from the counts (:func:`verify.flows.scan_snap_kclass.decomposition`). Returns ``(relative
    residual of g in span F, |iota_measured - eq. 86|, max |beta_measured - eq. 88 corrected|, min |beta_measured -
    eq. 88 printed|, min |eq. 88
    printed - corrected|, M h*(N-bar))``, over the classes ``m != n``."""
    from verify.flows.scan_snap_kclass import decomposition, kclass_decoder, theorem5_Y

    F = weak_attention(rng, M, K)
    eta = math.exp(rng.uniform(math.log(0.03), 0.0))
    nbar = int(round(math.exp(rng.uniform(math.log(20), math.log(200)))))
    order = rng.integers(K, size=K * nbar)
    out = kclass_decoder(F, M, eta, order, watch=False)
    _, theta, hbar = theorem5_Y(F, M, eta, out["counts"])
    n = int(rng.integers(K))
    a, r = decomposition(F, out["Y"], M, eta, out["counts"], n)
    Ep = np.eye(K) - np.linalg.inv(F.T @ F)
    err_iota = abs(a[n] - iota_eq86(Ep, theta, M, n))
    worst, worst_p, e_printed = 0.0, np.inf, np.inf
    for m in range(K):
        if m == n:
            continue
        worst = max(worst, abs(-a[m] - beta_eq88(Ep, theta, M, n, m)))
        worst_p = min(worst_p, abs(-a[m] - beta_eq88(Ep, theta, M, n, m, printed=True)))
        e_printed = min(e_printed, abs(beta_eq88(Ep, theta, M, n, m) - beta_eq88(Ep, theta, M, n, m, printed=True)))
    return r, err_iota, worst, worst_p, e_printed, M * hbar


# =====================================================================================
# Remark 1, eq. 43
# =====================================================================================
def equal_overlap_attention(M: int, K: int, rho: float) -> np.ndarray:
    """Nonnegative unit columns f_n = a e_n + c 1 (n < K) with f_n^T f_n' = rho for n != n'.

    a = sqrt(1 - rho) and c > 0 solves M c^2 + 2 a c - rho = 0, so F^T F = (1 - rho) I + rho 11^T.
    """
    a = math.sqrt(1 - rho)
    c = (-a + math.sqrt(a * a + M * rho)) / M
    return a * np.eye(M)[:, :K] + c


def decoder_rows(F: np.ndarray, eta_Y: float, epochs: int, order: str) -> np.ndarray:
    """W = F^T Y after ``epochs`` passes over the K classes of the decoder dynamics (eq. 7),
    Y(0) = 0, Y += eta_Y f_n (e_n - alpha_n)^T, alpha_n = softmax(Y^T f_n).

    ``order="epoch"``: each class contributes one batch-1 gradient per epoch, all evaluated at the
    epoch's start (every class has received exactly N/K steps: the per-class count of eq. 43).
    ``order="round_robin"``: batch-1 SGD, classes 0..K-1 in turn, each gradient at the current Y.
    """
    M, K = F.shape
    Y = np.zeros((M, M))
    onehot = np.eye(M)[:K]
    for _ in range(epochs):
        if order == "epoch":
            Y = Y + eta_Y * F @ (onehot - softmax((Y.T @ F).T))
        else:
            for n in range(K):
                Y = Y + eta_Y * np.outer(F[:, n], onehot[n] - softmax(Y.T @ F[:, n]))
    return F.T @ Y


def lemma5_case(rng, M: int, eta: float, steps: int) -> dict:
    """Lemma 5 for one class: the single-class decoder dynamics
    (:func:`verify.models.scan_snap.decoder_run`) from a random nonnegative unit attention vector
    (length 12) and label, against ``w_n(s) = h*(s) (M e_n - 1)`` and ``alpha_nn(s)`` of eq. 32
    with ``h*(s-1)``, and against the registered records at 8 log-spaced steps (relative errors);
    with the two controls (the continuous ``h(s)`` of eq. 45 in place of ``h*(s)``, ``alpha`` from
    ``h*(s)``) and their values between the closed forms."""

    def _get(name):
        return theory.get(f"scan_snap.{name}")

    L = 12
    f = np.abs(rng.standard_normal(L))
    f /= np.linalg.norm(f)
    label = int(rng.integers(M))
    w, alpha = decoder_run(M, eta, steps, f, label)
    hs = trajectory(steps, M, eta)
    pattern = -np.ones(M)
    pattern[label] = M - 1  # (M - 1) zeta_n = M e_n - 1
    pred_w = hs[:, None] * pattern[None, :]
    ew = np.max(np.abs(w - pred_w)) / np.max(np.abs(pred_w))
    a_lab = 1.0 / (1.0 + (M - 1) * np.exp(-M * hs[:-1]))  # eq. 32 with h*(s-1)
    a_oth = 1.0 / ((M - 1) + np.exp(M * hs[:-1]))
    pred_a = np.repeat(a_oth[:, None], M, axis=1)
    pred_a[:, label] = a_lab
    ea = np.max(np.abs(alpha - pred_a)) / np.max(np.abs(pred_a))
    # the registered records at log-spaced steps (evaluated through scan_snap.h.discrete)
    ss = np.unique(np.geomspace(1, steps, 8).astype(int))
    rec = []
    for s in ss:
        kw = dict(s=int(s), M=M, eta_Y=eta)
        rec += [abs(_get("decoder.label_logit")(**kw) - w[s, label]) / abs(w[s, label]),
                abs(_get("decoder.alpha_correct")(**kw) - alpha[s - 1, label]) / alpha[s - 1, label],
                abs(_get("decoder.residual")(**kw) - (1 - alpha[s - 1, label])) / (1 - alpha[s - 1, label])]
    er = max(rec)
    # controls: the continuous h(s) in place of h*(s); alpha from h*(s) instead of h*(s-1)
    hc = _get("h.continuous")(t=np.arange(steps + 1, dtype=float), M=M, eta_Y=eta)
    ctrl_cont = np.max(np.abs(w - hc[:, None] * pattern[None, :])) / np.max(np.abs(pred_w))
    a_shift = 1.0 / (1.0 + (M - 1) * np.exp(-M * hs[1:]))
    ctrl_shift = np.max(np.abs(alpha[:, label] - a_shift)) / np.max(a_lab)
    e_cont = np.max(np.abs((hs - hc)[:, None] * pattern[None, :])) / np.max(np.abs(pred_w))
    e_shift = np.max(np.abs(a_lab - a_shift)) / np.max(a_lab)
    return {"label": label, "rel_err_w": ew, "rel_err_alpha": ea, "rel_err_records": er, "h*(S)": hs[-1],
            "control continuous": ctrl_cont, "control shift": ctrl_shift,
            "expected continuous": e_cont, "expected shift": e_shift}


def regime_errors(M: int, eta: float):
    """``h(t)`` of eq. 45 against its linear form (Theorem 1(a)) at ``t = 1e-5..1e-1 t_A`` (relative
    error over ``u/M``, twice the second-order term) and its logarithmic form at ``t = 10..1e8 t_B``
    (relative error over twice the first-order term ``((M-1) u + 1)/(M eta_Y t u)``), with the
    wrong forms of the controls (``M - 1`` for ``M``; ``ln(eta_Y t)``) and their values between the
    closed forms; and the discrete recursion ``h*`` in both regimes (reported)."""
    tA = _cf("scan_snap.speed.scan_end", M=M, K=1, eta_Y=eta)
    tB = _cf("scan_snap.speed.crossing_time", M=max(M, 4), K=1, eta_Y=eta)
    # linear: e^u + (M-1) u = 1 + M eta t gives u = eta t - u^2/(2M) + ..., so the relative
    # error of eta t/M is about u/(2M); test |ratio - 1| <= u/M at t = 1e-5..1e-1 t_A
    t = tA * np.logspace(-5, -1, 9)
    h = h_numpy(t, M, eta)
    u = M * h
    pred = _cf("scan_snap.h.linear", t=t, M=M, eta_Y=eta)
    lin = float(np.max(np.abs(h / pred - 1) / (u / M)))
    lin_ctrl = float(np.max(np.abs(h / (eta * t / (M - 1)) - 1) / (u / M)))
    e_lin = float(np.max(np.abs(pred / (eta * t / (M - 1)) - 1) / (u / M)))
    # logarithmic: u = ln(M eta t + 1 - (M-1) u), so |u - ln(M eta t)| <= ((M-1) u + 1)/(M eta t)
    # to first order; test |ratio - 1| <= 2 ((M-1) u + 1)/(M eta t u) at t = 10..1e8 t_B
    t = tB * np.logspace(1, 8, 8)
    h = h_numpy(t, M, eta)
    u = M * h
    err_bound = 2 * ((M - 1) * u + 1) / (M * eta * t * u)
    pred = _cf("scan_snap.h.logarithmic", t=t, M=M, eta_Y=eta)
    log = float(np.max(np.abs(h / pred - 1) / err_bound))
    log_ctrl = float(np.max(np.abs(h / (np.log(eta * t) / M) - 1) / err_bound))
    e_log = float(np.max(np.abs(pred / (np.log(eta * t) / M) - 1) / err_bound))
    # the discrete recursion in both regimes (reported)
    s_lin = max(1, int(tA / 10))
    s_log = min(int(100 * tB), 100_000)
    hs = trajectory(s_log, M, eta)
    entry = {
        "t_A": tA, "t_B": tB,
        "h*(s)/(eta s/M) at s = t_A/10": float(hs[s_lin] / (eta * s_lin / M)),
        "h*(s)/(ln(M eta s)/M) at s = min(100 t_B, 3e5)": float(hs[s_log] / (math.log(M * eta * s_log) / M))}
    return {"lin": lin, "lin_ctrl": lin_ctrl, "e_lin": e_lin, "log": log, "log_ctrl": log_ctrl,
            "e_log": e_log}, entry


# =====================================================================================
# Lemma 7, Remark 2
# =====================================================================================
def time_shift(s: np.ndarray, hs: np.ndarray, M: int, eta_Y: float) -> np.ndarray:
    """c(s) with h(s + c) = h*(s): c = t(h*(s)) - s by the explicit inverse t(h) (Lemma 6)."""
    return _cf("scan_snap.h.time_of", h=hs[s], M=M, eta_Y=eta_Y) - s
