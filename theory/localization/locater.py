"""The LOCATER regulariser and its gradients (Bao, Hataya, Karakida 2024, Sec. 6).

Derived here: ``locater.regulariser``, ``locater.grad_query``, ``locater.grad_key``: the
regulariser ``kappa1 tr(W_QK^T W_QK) + kappa2 (tr W_QK - 1)^2`` with ``W_QK = W_Q^T W_K`` and its
gradients by sympy matrix calculus, the chain rule through the scalars ``tr(W_QK^T W_QK)`` and
``tr W_QK``; the printed mean-term gradients ``[tr - 1] tr W_K`` are the erratum (correct:
``2 (tr - 1) W_K``).

``locater.stationary_scale`` [derived; not in the paper]: at every stationary point of the
regulariser over the factors ``(W_Q, W_K)`` the scale is fixed by the trace,
``||W_QK||_F^2 = kappa2 t (1 - t) / kappa1`` with ``t = tr W_QK``. Scaling ``W_Q -> c W_Q`` is a
direction of the factor space along which ``s = tr(W_QK^T W_QK)`` scales as ``c^2`` and
``t = tr W_QK`` as ``c``; the regulariser's derivative along it at ``c = 1``,
``2 s dR/ds + t dR/dt = 2 kappa1 s + 2 kappa2 t (t - 1)``, vanishes at a stationary point, and
sympy solves it for ``s``. Every stationary point has this scale, whatever its rank (the global
minimiser ``W_QK = a I``, ``a = kappa2 / (kappa1 + d kappa2)``, is one; training with Adam ends at
lower-rank ones where some directions of ``W_Q`` and ``W_K`` have died together). So ``kappa2 = 0``
gives scale 0, and at a rank-``r`` stationary point ``W_QK = a P`` (``P`` a projector) the scale
``r kappa2^2 / (kappa1 + r kappa2)^2`` grows with ``kappa2``: where the penalty dominates the
loss (Sec. 7's ``kappa1 = 100``) a stronger ``kappa2`` raises the eigenspectrum scale, against the
caption of Fig. 6(B).

The QK-gradient of eq. 3 involves the ``d x T`` token matrix and is not a D x D record; its
per-sample form (with the matrix P restored) and the printed form are numeric functions in
:mod:`verify.models.localization`, decided by the check ``localization.gradient.eq3_autograd``.

Contains
--------
``localization.locater.regulariser``, ``.grad_query``, ``.grad_key``, ``.stationary_scale``.

References
----------
.. [1] H. Bao, R. Hataya, R. Karakida, "Self-attention networks localize when QK-eigenspectrum
   concentrates", ICML 2024, eq. 3, Sec. 6.
"""

from __future__ import annotations

from ..params import matrix, positive, real
from ..registry import ClosedForm, register
from . import sym

W_Q = matrix("W_Q", "The query matrix (W_QK = W_Q^T W_K).")
W_K = matrix("W_K", "The key matrix (W_QK = W_Q^T W_K).")
KAPPA1 = positive("kappa1", "LOCATER weight of the scale term tr(W_QK^T W_QK).")
KAPPA2 = positive("kappa2", "LOCATER weight of the mean term (tr W_QK - 1)^2.")
T_TRACE = real("trW_QK", "The trace t = tr W_QK (the eigenspectrum mean of Sec. 6).", example=0.2)


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



def derive_stationary_scale():
    """``s = tr(W_QK^T W_QK)`` at a stationary point of ``R = kappa1 s + kappa2 (t - 1)^2`` over
    ``(W_Q, W_K)``: the derivative of ``R(c^2 s, c t)`` at ``c = 1`` (the direction ``W_Q -> c W_Q``)
    vanishes; solved for ``s``."""
    import sympy as sp

    k1, k2, t = sym("kappa1"), sym("kappa2"), sym("trW_QK")
    s, c = sp.Symbol("s_scale"), sp.Symbol("c", positive=True)
    R = k1 * s + k2 * (t - 1) ** 2
    along = sp.diff(R.subs({s: c**2 * s, t: c * t}, simultaneous=True), c).subs(c, 1)
    (root,) = sp.solve(sp.Eq(along, 0), s)
    return sp.factor(root)


register(ClosedForm(
    id="localization.locater.stationary_scale",
    title="Scale of W_QK at a stationary point of the LOCATER regulariser, kappa2 t (1 - t) / kappa1",
    source="Sec. 6 (stationary points of the regulariser [derived])",
    status="exact",
    params=(T_TRACE, KAPPA1, KAPPA2),
    derive=derive_stationary_scale,
    doc="tr(W_QK^T W_QK) at any stationary point of kappa1 tr(W_QK^T W_QK) + kappa2 (tr W_QK - 1)^2 over "
        "(W_Q, W_K), given t = tr W_QK (the regulariser's derivative along W_Q -> c W_Q vanishes). Not in "
        "the paper: the scale a LOCATER-trained W_QK approaches where the penalty dominates the loss's "
        "gradient (Sec. 7: kappa1 = 100); it is 0 at kappa2 = 0 and grows with kappa2.",
))
