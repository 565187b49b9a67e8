"""Eigenspectrum statistics of W = W_QK Sigma (Bao, Hataya, Karakida 2024, eqs. 5, 6, 8, 10).

Conventions: ``W = W_QK Sigma`` with eigenvalues ``w_1..w_d``; the eigenspectrum mean is
``tr W``, the scale ``tr W^2 = tr(W_QK Sigma W_QK Sigma)`` (not ``||W||_F^2``), the variance
(eq. 8) is taken over a uniform random index.

Derived here (not retyped):

* ``eigen.variance`` (eq. 8): ``d^2 (E[w_i^2] - E[w_i]^2)`` with the moments of a uniform
  index, ``E[w_i] = tr W / d`` and ``E[w_i^2] = tr W^2 / d``;
* ``eigen.trace_bound`` (eq. 5): the largest ``tr W`` at which the variance (eq. 8) is still
  nonnegative, solved by sympy;
* ``eigen.xi``, ``eigen.eta``: the control parameters of rho(theta) (eq. 6), from
  ``xi eta = tr W / lambda`` and ``eta = sqrt(tr W^2) / lambda``;
* ``eigen.scale``: ``sum_i w_i^2 = tr(W^2)``, with eq. 10's printed equality
  ``sqrt(tr W^2) = ||W||_F`` as the erratum (false unless ``W`` is symmetric).

Contains
--------
``localization.eigen.variance``, ``.trace_bound``, ``.xi``, ``.eta``, ``.scale``.

References
----------
.. [1] H. Bao, R. Hataya, R. Karakida, "Self-attention networks localize when QK-eigenspectrum
   concentrates", ICML 2024, eqs. 5, 6, 8, 10.
"""

from __future__ import annotations

import numpy as np

from ..params import covariance, index, matrix
from ..registry import ClosedForm, register
from . import sym
from .random_walk import TEMP, TRW, TRW2

D_DIM = index("d", "Dimension of the tokens (number of eigenvalues of W).", low=1, sample=(1, 9), example=3)
W_QK = matrix("W_QK", "The joint query-key matrix W_QK.")
SIGMA = covariance("Sigma", "Token covariance Sigma (Assumption 1).")


def _array(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def _trace_domain(values, dims):
    """Eq. 5: a real spectrum has tr(W)^2 <= d tr(W^2)."""
    trW, trW2 = _array(values["trW"]), _array(values["trW2"])
    if np.any(trW**2 > values["d"] * trW2 * (1 + 1e-12)):
        raise ValueError("trW: |tr W| exceeds sqrt(d tr W^2) (eq. 5); no real spectrum has these traces")


def derive_variance():
    """d^2 V[w_i] over a uniform index i: E[w_i] = tr W / d, E[w_i^2] = tr W^2 / d."""
    import sympy as sp

    d, trW, trW2 = sym("d"), sym("trW"), sym("trW2")
    k = sp.Symbol("k", integer=True, positive=True)
    w = sp.IndexedBase("w")
    first = sp.Sum(w[k], (k, 1, d)) / d           # E[w_i]
    second = sp.Sum(w[k] ** 2, (k, 1, d)) / d     # E[w_i^2]
    expr = d**2 * (second - first**2)
    expr = expr.subs({sp.Sum(w[k] ** 2, (k, 1, d)): trW2, sp.Sum(w[k], (k, 1, d)): trW})
    return sp.expand(expr)


def printed_variance():
    d, trW, trW2 = sym("d"), sym("trW"), sym("trW2")
    return d * trW2 - trW**2


def derive_trace_bound():
    """The largest tr W at fixed tr W^2: the positive root of d^2 V[w_i] = 0 (eq. 8)."""
    import sympy as sp

    trW = sym("trW")
    roots = sp.solve(sp.Eq(derive_variance(), 0), trW)
    (upper,) = [r for r in roots if r.could_extract_minus_sign() is False]
    return upper


def printed_trace_bound():
    import sympy as sp

    return sp.sqrt(sym("d") * sym("trW2"))


def derive_eta():
    """eta = sqrt(tr W^2) / lambda: the scale of u_i's fluctuation (Lemma 1: v^i ~ tr W^2/lambda^2)."""
    import sympy as sp

    return sp.sqrt(sym("trW2")) / sym("temperature")


def derive_xi():
    """xi = (xi eta) / eta with xi eta = tr W / lambda (the mean term of Lemma 1)."""
    lam = sym("temperature")
    xi_eta = sym("trW") / lam
    return xi_eta / derive_eta()


def printed_xi():
    import sympy as sp

    return sym("trW") / sp.sqrt(sym("trW2"))


def derive_scale():
    """tr(W^2) = sum_i w_i^2 with W = W_QK Sigma (the eigenvalues of W^2 are the w_i^2)."""
    import sympy as sp

    W = sym("W_QK") * sym("Sigma")
    return sp.Trace(W * W)


def printed_scale():
    """Eq. 10 equates sqrt(tr W^2) with ||W||_F; squared: ||W||_F^2 = tr(W^T W)."""
    import sympy as sp

    W = sym("W_QK") * sym("Sigma")
    return sp.Trace(W.T * W)


register(ClosedForm(
    id="localization.eigen.variance",
    title="Eigenspectrum variance d^2 V[w_i] of W = W_QK Sigma",
    source="eq. 8",
    status="exact",
    params=(D_DIM, TRW, TRW2),
    derive=derive_variance,
    printed=printed_variance,
    domain=_trace_domain,
    doc="Over a uniform random eigenvalue index: d^2 (E[w_i^2] - E[w_i]^2) = d tr(W^2) - tr(W)^2. "
        "Here tr(W^2) = tr(W_QK Sigma W_QK Sigma) = sum_i w_i^2, not ||W||_F^2. Parameters with "
        "tr(W)^2 > d tr(W^2) have no real spectrum (eq. 5) and are rejected.",
))

register(ClosedForm(
    id="localization.eigen.trace_bound",
    title="Largest |tr W| at fixed tr W^2: sqrt(d tr W^2)",
    source="eq. 5",
    status="exact",
    params=(D_DIM, TRW2),
    derive=derive_trace_bound,
    printed=printed_trace_bound,
    doc="-sqrt(d tr W^2) <= tr W <= sqrt(d tr W^2) (Jensen / Cauchy-Schwarz over the eigenvalues); "
        "equality iff all eigenvalues are equal (zero eigenspectrum variance, eq. 8).",
))

register(ClosedForm(
    id="localization.eigen.xi",
    title="Control parameter xi = tr W / sqrt(tr W^2) of rho(theta)",
    source="Sec. 4 (below eq. 6)",
    status="exact",
    params=(TRW, TRW2),
    derive=derive_xi,
    printed=printed_xi,
    doc="xi lies in [-sqrt(d), sqrt(d)] by eq. 5; xi eta = tr W / lambda.",
))

register(ClosedForm(
    id="localization.eigen.eta",
    title="Control parameter eta = sqrt(tr W^2) / lambda of rho(theta)",
    source="Sec. 4 (below eq. 6)",
    status="exact",
    params=(TRW2, TEMP),
    derive=derive_eta,
    printed=derive_eta,
    doc="The text divides by lambda; the Fig. 2 caption prints lambda^2 (a typo: only /lambda is "
        "consistent with eq. 6 and Lemma 1's variance tr W^2 / lambda^2).",
))

register(ClosedForm(
    id="localization.eigen.scale",
    title="Eigenspectrum scale tr(W^2) = sum_i w_i^2 of W = W_QK Sigma (M = W_QK)",
    source="eqs. 4-6 and 10",
    status="exact",
    params=(SIGMA, W_QK),
    derive=derive_scale,
    printed=printed_scale,
    output="scalar",
    erratum="Eq. 10 writes sqrt(tr W^2) = ||W||_F. W = W_QK Sigma is not symmetric for anisotropic "
            "Sigma, and tr(W^2) < ||W||_F^2 then (the printed form is ||W||_F^2); equality needs "
            "W symmetric (e.g. Sigma = I with symmetric W_QK). The valid chain of eq. 10 is "
            "localization.bounds.frobenius_upper.",
    doc="M is W_QK here. tr(W^2) = tr(W_QK Sigma W_QK Sigma) = ||Sigma^1/2 W_QK Sigma^1/2||_F^2 for "
        "symmetric W_QK.",
))
