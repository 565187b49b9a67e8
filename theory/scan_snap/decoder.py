"""The decoder of Scan and Snap (Tian, Wang, Chen, Du 2023, §4, Lemma 5, eqs. 31-33, 39, 71).

Derived here (sympy, not retyped): Lemma 5 (eqs. 31-32). After s steps of next token n from
``Y(0) = 0``, the decoder row is ``w_n(s) = (M-1) h*(s) zeta_n``: entry ``(M-1) h*`` on the label and
``-h*`` elsewhere. Its softmax ``alpha_n(s)`` (computed from ``w_n(s-1)``) and the residual
``e_n - alpha_n(s) = (M-1)/((M-1) + e^{M h*(s-1)}) zeta_n`` follow from that entry pattern. ``h*``
is the recursion of eq. 33 (record ``scan_snap.h.discrete``), evaluated in the requested backend
(``evaluate=``); the sympy expressions are written in the auxiliary symbol ``h``.

Contains
--------
``scan_snap.decoder.label_logit``, ``.alpha_correct``, ``.residual``.
"""

from __future__ import annotations

from functools import cache


from ..params import index
from ..backends import backend_ops
from ..registry import ClosedForm, register
from . import sym
from .h import ETA_Y
from .h import M_P as M_VOCAB

S_STEP = index("s", "Decoder step s >= 1 (Lemma 5: every step has next token n).")
DEC_PARAMS = (S_STEP, M_VOCAB, ETA_Y)


# -- Lemma 5: the decoder row and its softmax -------------------------------------------------
def _zeta_entries():
    """Entries of zeta_n = M/(M-1) (e_n - 1/M): (label entry, any other entry)."""
    import sympy as sp

    M = sym("M")
    return sp.simplify(M / (M - 1) * (1 - 1 / M)), sp.simplify(M / (M - 1) * (-1 / M))


@cache
def derive_label_logit():
    """Label entry of w_n = (M-1) h zeta_n (eq. 31): (M-1) h."""
    import sympy as sp

    M, h = sym("M"), sym("h")
    return sp.simplify((M - 1) * h * _zeta_entries()[0])


@cache
def _softmax_of_row():
    """(alpha on the label, alpha on one other token) for the row (M-1) h zeta_n."""
    import sympy as sp

    M, h = sym("M"), sym("h")
    lab, oth = ((M - 1) * h * e for e in _zeta_entries())
    den = sp.exp(lab) + (M - 1) * sp.exp(oth)  # the label plus M-1 identical other entries
    return sp.simplify(sp.exp(lab) / den), sp.simplify(sp.exp(oth) / den)


@cache
def derive_alpha_correct():
    """Label entry of softmax((M-1) h zeta_n)."""
    return _softmax_of_row()[0]


@cache
def derive_residual():
    """Coefficient c with e_n - alpha_n = c zeta_n: c = 1 - alpha_nn (label entry of zeta_n is 1);
    the other entries agree, -alpha_nj = c (-1/(M-1)), which is asserted."""
    import sympy as sp

    a, o = _softmax_of_row()
    c = sp.simplify(1 - a)
    lab, oth = _zeta_entries()
    assert sp.simplify(lab - 1) == 0 and sp.simplify(-o - c * oth) == 0
    return c


def printed_alpha_correct():
    """Eq. 32, j = n: exp(M h*(s-1)) / ((M-1) + exp(M h*(s-1)))."""
    import sympy as sp

    M, h = sym("M"), sym("h")
    return sp.exp(M * h) / ((M - 1) + sp.exp(M * h))


def printed_residual():
    """Lemma 5: e_n - alpha_n(s) = (M-1)/(M-1+exp(M h*(s-1))) zeta_n."""
    import sympy as sp

    M, h = sym("M"), sym("h")
    return (M - 1) / ((M - 1) + sp.exp(M * h))


# -- numerics ----------------------------------------------------------------------------------
def _h_star(backend, s, values):
    """h*(s) from scan_snap.h.discrete (h*(0) = 0)."""
    import theory

    conv = backend_ops(backend).number
    if s == 0:
        return conv(0.0)
    eta = values["eta_Y"]
    if backend == "torch":  # a float32 tensor: h* in float64 (the record casts its result at the end)
        eta = conv(eta)
    return theory.get("scan_snap.h.discrete")(backend, s=s, M=values["M"], eta_Y=eta)


def _decoder_derived(shift):
    def derived(values, dims, backend="numpy"):
        return {"h": _h_star(backend, values["s"] - shift, values)}

    return derived


def _decoder_eval(kind):
    def evaluate(backend, values, dims):
        exp = backend_ops(backend).exp
        M = values["M"]
        if kind == "label":
            return (M - 1) * _h_star(backend, values["s"], values)
        h = _h_star(backend, values["s"] - 1, values)
        if kind == "alpha":
            return 1 / (1 + (M - 1) * exp(-M * h))
        return (M - 1) * exp(-M * h) / (1 + (M - 1) * exp(-M * h))  # residual, finite for large M h

    return evaluate


# -- registry ---------------------------------------------------------------------------------------
register(ClosedForm(
    id="scan_snap.decoder.label_logit",
    title="Lemma 5: label entry of the decoder row w_n(s) = (M-1) h*(s) zeta_n",
    source="Lemma 5, eqs. 31, 39",
    status="exact",
    params=DEC_PARAMS,
    derive=derive_label_logit,
    printed=lambda: (sym("M") - 1) * sym("h"),
    derived=_decoder_derived(0),
    derived_names=("h",),
    evaluate=_decoder_eval("label"),
    doc="w_n(s) = h*(s) (M e_n - 1): (M-1) h*(s) on the label, -h*(s) elsewhere (eq. 39), after s steps "
        "of next token n from Y(0) = 0; h = h*(s) from eq. 33 (record scan_snap.h.discrete).",
))

register(ClosedForm(
    id="scan_snap.decoder.alpha_correct",
    title="Lemma 5, eq. 32: softmax probability of the correct token at step s",
    source="Lemma 5, eq. 32",
    status="exact",
    params=DEC_PARAMS,
    derive=derive_alpha_correct,
    printed=printed_alpha_correct,
    derived=_decoder_derived(1),
    derived_names=("h",),
    evaluate=_decoder_eval("alpha"),
    doc="alpha_nn(s) = softmax(w_n(s-1))_n = e^{M h} / ((M-1) + e^{M h}) with h = h*(s-1) (the softmax of "
        "the entry pattern (M-1) h, -h, ..., -h); the other entries are 1/((M-1) + e^{M h}). Evaluated as "
        "1/(1 + (M-1) e^{-M h}).",
))

register(ClosedForm(
    id="scan_snap.decoder.residual",
    title="Lemma 5: e_n - alpha_n(s) = (M-1)/((M-1) + e^{M h*(s-1)}) zeta_n (the coefficient)",
    source="Lemma 5 (after eq. 32), Corollary 1, eq. 71",
    status="exact",
    params=DEC_PARAMS,
    derive=derive_residual,
    printed=printed_residual,
    derived=_decoder_derived(1),
    derived_names=("h",),
    evaluate=_decoder_eval("residual"),
    doc="1 - alpha_nn(s) with h = h*(s-1); e_n - alpha_n is exactly parallel to zeta_n (checked in the "
        "derivation). This is the step of h*: h*(s) - h*(s-1) = eta_Y/(M-1) times this coefficient.",
))
