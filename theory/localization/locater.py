"""The LOCATER regulariser and its gradients (Bao, Hataya, Karakida 2024, Sec. 6).

Derived here: ``locater.regulariser``, ``locater.grad_query``, ``locater.grad_key``: the
regulariser ``kappa1 tr(W_QK^T W_QK) + kappa2 (tr W_QK - 1)^2`` with ``W_QK = W_Q^T W_K`` and its
gradients by sympy matrix calculus, the chain rule through the scalars ``tr(W_QK^T W_QK)`` and
``tr W_QK``; the printed mean-term gradients ``[tr - 1] tr W_K`` are the erratum (correct:
``2 (tr - 1) W_K``).

The QK-gradient of eq. 3 involves the ``d x T`` token matrix and is not a D x D record; its
per-sample form (with the matrix P restored) and the printed form are numeric functions in
:mod:`verify.models.localization`, decided by the check ``localization.gradient.eq3_autograd``.

Contains
--------
``localization.locater.regulariser``, ``.grad_query``, ``.grad_key``.

References
----------
.. [1] H. Bao, R. Hataya, R. Karakida, "Self-attention networks localize when QK-eigenspectrum
   concentrates", ICML 2024, eq. 3, Sec. 6.
"""

from __future__ import annotations

from ..params import matrix, positive
from ..registry import ClosedForm, register
from . import sym

W_Q = matrix("W_Q", "The query matrix (W_QK = W_Q^T W_K).")
W_K = matrix("W_K", "The key matrix (W_QK = W_Q^T W_K).")
KAPPA1 = positive("kappa1", "LOCATER weight of the scale term tr(W_QK^T W_QK).")
KAPPA2 = positive("kappa2", "LOCATER weight of the mean term (tr W_QK - 1)^2.")


def _locater_parts():
    import sympy as sp

    Wq, Wk = sym("W_Q"), sym("W_K")
    Wqk = Wq.T * Wk
    scale, mean = sp.Trace(Wqk.T * Wqk), sp.Trace(Wqk)
    s, t = sp.Symbol("s_scale"), sp.Symbol("t_mean")
    R = sym("kappa1") * s + sym("kappa2") * (t - 1) ** 2
    return Wq, Wk, scale, mean, s, t, R


def derive_regulariser():
    """kappa1 tr(W_QK^T W_QK) + kappa2 (tr W_QK - 1)^2 with W_QK = W_Q^T W_K."""
    _, _, scale, mean, s, t, R = _locater_parts()
    return R.subs({s: scale, t: mean})


def derive_locater_gradient(wrt: str):
    """dR/dW = dR/ds ds/dW + dR/dt dt/dW (chain rule through the two traces; sympy matrix calculus)."""
    Wq, Wk, scale, mean, s, t, R = _locater_parts()
    X = Wq if wrt == "query" else Wk
    grad = R.diff(s) * scale.diff(X) + R.diff(t) * mean.diff(X)
    return grad.subs({s: scale, t: mean})


def printed_locater_gradient(wrt: str):
    """Sec. 6: scale term 2 W_K W_K^T W_Q (resp. 2 W_Q W_Q^T W_K), mean term [tr - 1] tr(W_QK) W_K (resp. W_Q)."""
    import sympy as sp

    Wq, Wk = sym("W_Q"), sym("W_K")
    tr = sp.Trace(Wq.T * Wk)
    if wrt == "query":
        return sym("kappa1") * 2 * Wk * Wk.T * Wq + sym("kappa2") * (tr - 1) * tr * Wk
    return sym("kappa1") * 2 * Wq * Wq.T * Wk + sym("kappa2") * (tr - 1) * tr * Wq


register(ClosedForm(
    id="localization.locater.regulariser",
    title="LOCATER regulariser kappa1 ||W_QK||_F^2 + kappa2 (tr W_QK - 1)^2 (A = W_Q, M = W_K)",
    source="Sec. 6",
    status="exact",
    params=(W_Q, W_K, KAPPA1, KAPPA2),
    derive=derive_regulariser,
    doc="W_QK = W_Q^T W_K (possibly asymmetric); the scale term is tr(W_QK^T W_QK) = ||W_QK||_F^2, a "
        "proxy for tr W^2, the mean term pulls tr W_QK to 1.",
))

for _wrt, _other, _mat in (("query", "W_K", "W_Q"), ("key", "W_Q", "W_K")):
    register(ClosedForm(
        id=f"localization.locater.grad_{_wrt}",
        title=f"Gradient of the LOCATER regulariser w.r.t. W_{_wrt[0].upper()}",
        source="Sec. 6",
        status="exact",
        params=(W_Q, W_K, KAPPA1, KAPPA2),
        derive=lambda _w=_wrt: derive_locater_gradient(_w),
        printed=lambda _w=_wrt: printed_locater_gradient(_w),
        output="matrix",
        erratum=f"The printed mean-term gradient is [tr(W_QK) - 1] tr(W_QK) {_other}; the derivative of "
                f"(tr W_QK - 1)^2 is 2 [tr(W_QK) - 1] {_other}. The scale-term gradient is correct.",
        doc="Gradient in the layout of the matrix (d R / d X_ab at entry ab).",
    ))
