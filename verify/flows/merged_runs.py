"""Runs of the exact gradient flow of merged key-query linear attention (Zhang, Singh, Latham,
Saxe 2025, §3, eqs. 8, 10, 34, 54) and their figure series: the sigmoid ``sigma(t)`` of eq. 10
from an eq.-34 random start (with ``w_init^2`` replaced by the draw's ``s_eff``), and the
half-drop time from the aligned start.
"""

from __future__ import annotations

import numpy as np

from verify.flows import merged as fm
from verify.stats import evaluate as _cf

__all__ = ["FIG_POINTS", "FIG_MARKERS", "series", "lines_figure", "sigma_of", "aligned_sigma_run", "random_start_sigma",
           "aligned_half_drop", "plateau_figures"]

#: Largest number of points kept per figure series.
FIG_POINTS = 400


#: Largest number of markers per simulated series.
FIG_MARKERS = 80


def series(x, y, label: str, style: str = "-", group: str | None = None) -> dict:
    """A figure series thinned to about :data:`FIG_POINTS` points (:data:`FIG_MARKERS` markers for ``"o"``);
    ``group``: the condition it belongs to (the series of one group share a colour)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    step = max(1, x.size // (FIG_POINTS if style != "o" else FIG_MARKERS))
    out = {"label": label, "x": x[::step].tolist(), "y": y[::step].tolist(), "style": style}
    if group is not None:
        out["group"] = str(group)
    return out


def lines_figure(title: str, ylabel: str, series: list, xlabel: str = "t/τ", **scales) -> dict:
    """A figure spec of kind ``lines``."""
    return {"kind": "lines", "title": title, "xlabel": xlabel, "ylabel": ylabel, "series": series,
            **scales}


def sigma_of(v, U) -> float:
    """Projection of M on the identity: tr(M) / D (M = sigma I for Lambda = I, eq. 10)."""
    M = np.tensordot(v, U, axes=1)
    return float(np.trace(M)) / M.shape[0]


def aligned_sigma_run(mo, H: int, w: float, printed_sigma, *, tau: float, rtol: float):
    """The exact flow (eq. 8) with ``Lambda = I`` from the balanced start aligned with the
    identity at ``w_init = w`` against eq. 10 (``sigma``), eq. 51 (the loss), ``sigma_inf`` and the
    half-rise time; and against the wrong forms ``tau -> 2 tau`` (GD on L/2) and the printed
    eq. 10 (``printed_sigma``, or None). Returns ``(row of errors, t, flow result, sigma of the
    flow, eq. 10, eq. 51, {"tau_2tau", "printed"}: the wrong forms' gaps to eq. 10)``."""
    D, N = mo.D, mo.N
    sig_inf = _cf("linear_attention.merged.sigma_infinity", D=D, N=N)
    t_half = _cf("linear_attention.merged.half_rise_time", tau=tau, D=D, N=N, w_init=w)
    t = np.linspace(0.0, t_half + 8.0 * tau, 3001)
    v, U = fm.init_aligned(H, D, w)
    res = fm.integrate(mo, None, v, U, tau=tau, t_eval=t, rtol=rtol, dense=True)
    sig_ode = res.M[:, 0, 0]
    off = float(np.max(np.abs(res.M - sig_ode[:, None, None] * np.eye(D))))
    sig10 = _cf("linear_attention.merged.sigma", t=t, tau=tau, D=D, N=N, w_init=w)
    loss51 = _cf("linear_attention.merged.white_loss", t=t, tau=tau, D=D, N=N, w_init=w)
    d_sig = float(np.max(np.abs(sig_ode - sig10)))
    d_loss = float(np.max(np.abs(res.loss - loss51)))
    d_inf = abs(float(sig_ode[-1]) - sig_inf)
    t_half_ode = res.crossing(sig_ode, 0.5 * sig_inf, sigma_of)
    d_half = abs(t_half_ode - t_half)
    # negative control: the rate of the GD-on-L/2 convention (tau -> 2 tau)
    wrong = _cf("linear_attention.merged.sigma", t=t, tau=2 * tau, D=D, N=N, w_init=w)
    d_wrong = float(np.max(np.abs(sig_ode - wrong)))
    exp = {"tau_2tau": float(np.max(np.abs(sig10 - wrong))),
           "printed": (float(np.max(np.abs(sig10 - printed_sigma(t=t, tau=tau, D=D, N=N, w_init=w))))
                       if printed_sigma is not None else None)}
    d_printed = (float(np.max(np.abs(sig_ode - printed_sigma(t=t, tau=tau, D=D, N=N, w_init=w))))
                 if printed_sigma is not None else float("nan"))
    row = {"w_init": w, "max_abs_sigma_err": d_sig, "max_abs_loss_err": d_loss,
           "max_off_identity": off, "sigma_end_minus_sigma_inf": d_inf,
           "t_half_ode": t_half_ode, "t_half_theory": t_half, "abs_t_half_err": d_half,
           "max_abs_err_tau_2tau": d_wrong, "max_abs_err_printed": d_printed,
           "nfev": res.nfev}
    return row, t, res, sig_ode, sig10, loss51, exp


def random_start_sigma(mo, start, w: float, *, tau: float, rtol: float):
    """The exact flow (eq. 8) with ``Lambda = I`` from an eq.-34 draw ``start = (v, U)`` at
    ``w_init = w`` against eq. 10 with ``w_init^2`` replaced by the draw's ``s_eff`` and with the
    nominal ``w_init``: the errors, the gap between the two forms of eq. 10, the largest part of
    ``M`` off the identity, and the half-rise delays. Returns ``(row, t, sigma of the flow,
    eq. 10 with s_eff, eq. 10 with w_init)``."""
    D, N = mo.D, mo.N
    v, U = start
    sig_inf = _cf("linear_attention.merged.sigma_infinity", D=D, N=N)
    t_half_w = _cf("linear_attention.merged.half_rise_time", tau=tau, D=D, N=N, w_init=w)
    se = fm.s_eff(v, U, np.eye(D))
    t_half_eff = _cf("linear_attention.merged.half_rise_time", tau=tau, D=D, N=N,
                     w_init=np.sqrt(se))
    t = np.linspace(0.0, max(t_half_eff, t_half_w) + 8.0 * tau, 3001)
    res = fm.integrate(mo, None, v, U, tau=tau, t_eval=t, rtol=rtol, dense=True)
    sig_ode = np.trace(res.M, axis1=1, axis2=2) / D
    sig_eff = _cf("linear_attention.merged.sigma", t=t, tau=tau, D=D, N=N, w_init=np.sqrt(se))
    sig_raw = _cf("linear_attention.merged.sigma", t=t, tau=tau, D=D, N=N, w_init=w)
    t_half_ode = res.crossing(sig_ode, 0.5 * sig_inf, sigma_of)
    row = {
        "s_eff_over_w_init_sq": se / w**2,
        "max_abs_err_s_eff": float(np.max(np.abs(sig_ode - sig_eff))),
        "max_abs_err_w_init": float(np.max(np.abs(sig_ode - sig_raw))),
        "max_abs_gap_eq10_w_init_vs_s_eff": float(np.max(np.abs(sig_eff - sig_raw))),
        "max_off_identity": float(np.max(np.abs(res.M - sig_ode[:, None, None] * np.eye(D)))),
        "delay_vs_eq10_tau": t_half_ode - t_half_w,
        "delay_predicted_by_s_eff_tau": t_half_eff - t_half_w,
        "t_half_ode": t_half_ode,
    }
    return row, t, sig_ode, sig_eff, sig_raw


def aligned_half_drop(mo, H: int, w: float, L_star: float, T: float, *, tau: float, rtol: float):
    """Half-drop time (half-way from ``L(0)`` to ``L*``) of the exact flow from the balanced
    start aligned with ``E[y_q z]`` at ``w_init = w``, on ``[0, T]``. Returns ``(t_half, t,
    flow result)``; ``H`` heads."""
    t = np.linspace(0.0, T, 2001)
    v, U = fm.init_aligned(H, mo.D, w, direction=mo.L2)
    res = fm.integrate(mo, None, v, U, tau=tau, t_eval=t, rtol=rtol, dense=True)
    level = 0.5 * (res.loss[0] + L_star)
    th = res.crossing(res.loss, level,
                      lambda v_, U_: float(fm.loss(mo, None, fm.effective_matrix(v_, U_))))
    return th, t, res


def plateau_figures(x, t_half, t54, fig_loss) -> dict:
    """Half-drop time of the flow against ``x = ln(1/w_init)`` with eq. 54 (and eq. 54 shifted by
    the mean offset, which it does not predict), and the loss curves ``fig_loss``."""
    offsets = t_half - t54
    return {
        "plateau_half_times": lines_figure(
            "Half-drop time vs ln(1/w_init), non-white Λ (0.4, 0.3, 0.2, 0.1)", "t½/τ",
            [series(x, t_half, "ODE half-drop", "o"), series(x, t54, "eq. 54", "--"),
             series(x, t54 + np.mean(offsets), f"eq. 54 + {np.mean(offsets):.2f} τ (offset "
                    "not predicted)", ":")],
            xlabel="ln(1/w_init)"),
        "plateau_losses": lines_figure("Loss vs time for several w_init (aligned start)", "L(t)", fig_loss),
    }
