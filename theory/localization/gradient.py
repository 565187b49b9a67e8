"""Eigenspectrum statistics, the bounds of eqs. 5, 7, 9, 10 and the LOCATER regulariser
(Bao, Hataya, Karakida 2024, Secs. 4-6).

Conventions (spec §1.7): ``W = W_QK Sigma`` with eigenvalues ``w_1..w_d``; the eigenspectrum
mean is ``tr W``, the scale ``tr W^2 = tr(W_QK Sigma W_QK Sigma)`` (not ``||W||_F^2``), the
variance (eq. 8) is taken over a uniform random index. Scalar parameters: ``d`` (dimension),
``trW``, ``trW2``, ``temperature`` (lambda), ``T`` (sequence length), ``nu`` (the product
``||X X^T||_2 ||W_QK||_2`` of eq. 9), ``sigma_max`` / ``sigma_min`` (largest / smallest
eigenvalue of Sigma), ``kappa1``, ``kappa2`` (LOCATER weights). Matrix parameters of the
LOCATER records take the query and key matrices ``W_Q``, ``W_K`` (``W_QK = W_Q^T W_K``);
``localization.eigen.scale`` takes ``W_QK`` itself.

What is derived here (not retyped):

* ``eigen.variance`` (eq. 8): ``d^2 (E[w_i^2] - E[w_i]^2)`` with the moments of a uniform
  index, ``E[w_i] = tr W / d`` and ``E[w_i^2] = tr W^2 / d``;
* ``eigen.trace_bound`` (eq. 5): the largest ``tr W`` at which the variance (eq. 8) is still
  nonnegative, solved by sympy;
* ``eigen.xi``, ``eigen.eta``: the control parameters of rho(theta) (eq. 6), from
  ``xi eta = tr W / lambda`` and ``eta = sqrt(tr W^2) / lambda``;
* ``eigen.scale``: ``sum_i w_i^2 = tr(W^2)``, with eq. 10's printed equality
  ``sqrt(tr W^2) = ||W||_F`` as the erratum (false unless ``W`` is symmetric);
* ``bounds.spectral_lower``, ``bounds.frobenius_lower`` (eq. 7): the sharp constants ``c`` in
  ``|tr(W_QK Sigma)| <= c ||W_QK|| ||Sigma||_2``, evaluated at the equality case
  ``W_QK = Sigma = I_d`` (the upper bounds on ``c`` are von Neumann's trace inequality,
  ``c_2 <= d``, and Cauchy-Schwarz, ``c_F <= sqrt(d)``). The printed first inequality of
  eq. 7 uses ``sqrt(d)`` for the spectral norm: the erratum;
* ``bounds.frobenius_upper`` (eq. 10, the valid chain): ``W_QK = Sigma^{-1/2} B Sigma^{-1/2}``
  with ``B = Sigma^{1/2} W_QK Sigma^{1/2}`` symmetric, ``||B||_F^2 = tr W^2``;
* ``entropy.zhai_bound`` (eq. 9): the large-T form of Zhai et al.'s Theorem 3.1, obtained by
  replacing each T-dependent factor by its leading order (sympy limits); the printed eq. 9
  (exponent ``-nu/2`` in the numerator) exceeds ``ln T`` and is the erratum;
  ``entropy.zhai_theorem`` is the finite-T bound itself (the source of the large-T form);
* ``locater.regulariser``, ``locater.grad_query``, ``locater.grad_key`` (Sec. 6): the
  regulariser and its gradients by sympy matrix calculus, the chain rule through the scalars
  ``tr(W_QK^T W_QK)`` and ``tr W_QK``; the printed mean-term gradients ``[tr - 1] tr W_K``
  are the erratum (correct: ``2 (tr - 1) W_K``).

The QK-gradient of eq. 3 involves the ``d x T`` token matrix and is not a D x D record; its
per-sample form (with the matrix P restored) and the printed form are numeric functions in
:mod:`verify.models.localization`, decided by the check ``localization.gradient.eq3_autograd``.

References
----------
.. [1] H. Bao, R. Hataya, R. Karakida, "Self-attention networks localize when QK-eigenspectrum
   concentrates", ICML 2024, eqs. 3, 5, 7-10 and Sec. 6.
.. [2] S. Zhai et al., "Stabilizing transformer training by preventing attention entropy
   collapse", ICML 2023, Theorem 3.1.
"""

from __future__ import annotations

import numpy as np

from ..params import covariance, index, matrix, positive, real
from ..registry import ClosedForm, register

PAPER = "Bao, Hataya, Karakida 2024"

D_DIM = index("d", "Dimension of the tokens (number of eigenvalues of W).", low=1)
TRW = real("trW", "Eigenspectrum mean tr W = tr(W_QK Sigma).")
TRW2 = positive("trW2", "Eigenspectrum scale tr W^2 = tr(W_QK Sigma W_QK Sigma).")
TEMP = positive("temperature", "Softmax temperature lambda (commonly sqrt(d)).")
SIG_MAX = positive("sigma_max", "Largest eigenvalue ||Sigma||_2 of the token covariance.")
SIG_MIN = positive("sigma_min", "Smallest eigenvalue of the token covariance (1/||Sigma^-1||_2).")
T_LEN = index("T", "Sequence length (number of keys).", low=2)
NU = positive("nu", "||X X^T||_2 ||W_QK||_2, the spectral scale of the logits (eq. 9).")
W_QK = matrix("W_QK", "The joint query-key matrix W_QK.")
SIGMA = covariance("Sigma", "Token covariance Sigma (Assumption 1).")
W_Q = matrix("W_Q", "The query matrix (W_QK = W_Q^T W_K).")
W_K = matrix("W_K", "The key matrix (W_QK = W_Q^T W_K).")
KAPPA1 = positive("kappa1", "LOCATER weight of the scale term tr(W_QK^T W_QK).")
KAPPA2 = positive("kappa2", "LOCATER weight of the mean term (tr W_QK - 1)^2.")


def _s(name):
    from ..symbols import sym

    return sym(name)


def _array(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def _trace_domain(values, dims):
    """Eq. 5: a real spectrum has tr(W)^2 <= d tr(W^2)."""
    trW, trW2 = _array(values["trW"]), _array(values["trW2"])
    if np.any(trW**2 > values["d"] * trW2 * (1 + 1e-12)):
        raise ValueError("trW: |tr W| exceeds sqrt(d tr W^2) (eq. 5); no real spectrum has these traces")


# -- eigenspectrum: eq. 8, eq. 5, xi, eta, scale ------------------------------------------------
def derive_variance():
    """d^2 V[w_i] over a uniform index i: E[w_i] = tr W / d, E[w_i^2] = tr W^2 / d."""
    import sympy as sp

    d, trW, trW2 = _s("d"), _s("trW"), _s("trW2")
    k = sp.Symbol("k", integer=True, positive=True)
    w = sp.IndexedBase("w")
    first = sp.Sum(w[k], (k, 1, d)) / d           # E[w_i]
    second = sp.Sum(w[k] ** 2, (k, 1, d)) / d     # E[w_i^2]
    expr = d**2 * (second - first**2)
    expr = expr.subs({sp.Sum(w[k] ** 2, (k, 1, d)): trW2, sp.Sum(w[k], (k, 1, d)): trW})
    return sp.expand(expr)


def printed_variance():
    d, trW, trW2 = _s("d"), _s("trW"), _s("trW2")
    return d * trW2 - trW**2


def derive_trace_bound():
    """The largest tr W at fixed tr W^2: the positive root of d^2 V[w_i] = 0 (eq. 8)."""
    import sympy as sp

    trW = _s("trW")
    roots = sp.solve(sp.Eq(derive_variance(), 0), trW)
    (upper,) = [r for r in roots if r.could_extract_minus_sign() is False]
    return upper


def printed_trace_bound():
    import sympy as sp

    return sp.sqrt(_s("d") * _s("trW2"))


def derive_eta():
    """eta = sqrt(tr W^2) / lambda: the scale of u_i's fluctuation (Lemma 1: v^i ~ tr W^2/lambda^2)."""
    import sympy as sp

    return sp.sqrt(_s("trW2")) / _s("temperature")


def derive_xi():
    """xi = (xi eta) / eta with xi eta = tr W / lambda (the mean term of Lemma 1)."""
    lam = _s("temperature")
    xi_eta = _s("trW") / lam
    return xi_eta / derive_eta()


def printed_xi():
    import sympy as sp

    return _s("trW") / sp.sqrt(_s("trW2"))


def derive_scale():
    """tr(W^2) = sum_i w_i^2 with W = W_QK Sigma (the eigenvalues of W^2 are the w_i^2)."""
    import sympy as sp

    W = _s("W_QK") * _s("Sigma")
    return sp.Trace(W * W)


def printed_scale():
    """Eq. 10 equates sqrt(tr W^2) with ||W||_F; squared: ||W||_F^2 = tr(W^T W)."""
    import sympy as sp

    W = _s("W_QK") * _s("Sigma")
    return sp.Trace(W.T * W)


# -- eq. 7 and eq. 10: norm bounds ------------------------------------------------------------
def _sharp_constant(norm_of_identity):
    """c = |tr(I_d I_d)| / (||I_d|| ||I_d||_2) at the equality case W_QK = Sigma = I_d."""
    import sympy as sp

    I = sp.Identity(_s("d"))
    return sp.simplify(sp.trace(I * I) / (norm_of_identity(I) * 1))


def derive_spectral_lower():
    """|tr W| / (c_2 ||Sigma||_2) <= ||W_QK||_2, c_2 = d (||I_d||_2 = 1)."""
    import sympy as sp

    c = _sharp_constant(lambda I: sp.Integer(1))
    return sp.Abs(_s("trW")) / (c * _s("sigma_max"))


def derive_frobenius_lower():
    """|tr W| / (c_F ||Sigma||_2) <= ||W_QK||_F, c_F = sqrt(d) (||I_d||_F = sqrt(tr I_d))."""
    import sympy as sp

    c = _sharp_constant(lambda I: sp.sqrt(sp.trace(I.T * I)))
    return sp.Abs(_s("trW")) / (c * _s("sigma_max"))


def printed_eq7_first():
    """Eq. 7's first term |tr W| / (sqrt(d) ||Sigma||_2), printed as a lower bound of ||W_QK||_2."""
    import sympy as sp

    return sp.Abs(_s("trW")) / (sp.sqrt(_s("d")) * _s("sigma_max"))


def derive_frobenius_upper():
    """||W_QK||_F = ||Sigma^-1/2 B Sigma^-1/2||_F <= ||Sigma^-1/2||_2^2 ||B||_F, ||B||_F^2 = tr W^2."""
    import sympy as sp

    inv_sqrt_norm = _s("sigma_min") ** sp.Rational(-1, 2)
    return inv_sqrt_norm**2 * sp.sqrt(_s("trW2"))


# -- eq. 9: entropy lower bound --------------------------------------------------------------
def zhai_theorem():
    """Zhai et al. 2023, Thm 3.1: Ent >= log(1 + (T-1) beta) + nu sqrt(T(T-1)) beta / (1 + (T-1) beta),
    beta = exp(-nu sqrt(T/(T-1)))."""
    import sympy as sp

    T, nu = _s("T"), _s("nu")
    beta = sp.exp(-nu * sp.sqrt(T / (T - 1)))
    return sp.log(1 + (T - 1) * beta) + nu * sp.sqrt(T * (T - 1)) * beta / (1 + (T - 1) * beta)


def derive_zhai_bound():
    """Large-T form of Thm 3.1: every T-dependent factor replaced by its leading order."""
    import sympy as sp

    T, nu = _s("T"), _s("nu")
    lead = {}
    for factor, guess in ((T - 1, T), (sp.sqrt(T / (T - 1)), sp.Integer(1)), (sp.sqrt(T * (T - 1)), T)):
        if sp.limit(factor / guess, T, sp.oo) != 1:
            raise ArithmeticError(f"leading order of {factor} is not {guess}")
        lead[factor] = guess
    beta = sp.exp(-nu * lead[sp.sqrt(T / (T - 1))])
    a = lead[T - 1] * beta
    expr = sp.log(1 + a) + nu * lead[sp.sqrt(T * (T - 1))] * beta / (1 + a)
    return sp.log(1 + T * sp.exp(-nu)) + sp.simplify(expr - sp.log(1 + a))


def printed_zhai_bound():
    import sympy as sp

    T, nu = _s("T"), _s("nu")
    return sp.log(1 + T * sp.exp(-nu)) + nu * sp.exp(-nu / 2) / (1 / T + sp.exp(-nu))


# -- LOCATER ---------------------------------------------------------------------------------
def _locater_parts():
    import sympy as sp

    Wq, Wk = _s("W_Q"), _s("W_K")
    Wqk = Wq.T * Wk
    scale, mean = sp.Trace(Wqk.T * Wqk), sp.Trace(Wqk)
    s, t = sp.Symbol("s_scale"), sp.Symbol("t_mean")
    R = _s("kappa1") * s + _s("kappa2") * (t - 1) ** 2
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

    Wq, Wk = _s("W_Q"), _s("W_K")
    tr = sp.Trace(Wq.T * Wk)
    if wrt == "query":
        return _s("kappa1") * 2 * Wk * Wk.T * Wq + _s("kappa2") * (tr - 1) * tr * Wk
    return _s("kappa1") * 2 * Wq * Wq.T * Wk + _s("kappa2") * (tr - 1) * tr * Wq


# -- records ---------------------------------------------------------------------------------
register(ClosedForm(
    id="localization.eigen.variance",
    title="Eigenspectrum variance d^2 V[w_i] of W = W_QK Sigma",
    source=f"{PAPER}, eq. 8",
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
    source=f"{PAPER}, eq. 5",
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
    source=f"{PAPER}, Sec. 4 (below eq. 6)",
    status="exact",
    params=(TRW, TRW2),
    derive=derive_xi,
    printed=printed_xi,
    doc="xi lies in [-sqrt(d), sqrt(d)] by eq. 5; xi eta = tr W / lambda.",
))

register(ClosedForm(
    id="localization.eigen.eta",
    title="Control parameter eta = sqrt(tr W^2) / lambda of rho(theta)",
    source=f"{PAPER}, Sec. 4 (below eq. 6)",
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
    source=f"{PAPER}, eqs. 4-6 and 10",
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

register(ClosedForm(
    id="localization.bounds.spectral_lower",
    title="Lower bound |tr W| / (d ||Sigma||_2) of ||W_QK||_2",
    source=f"{PAPER}, eq. 7 (first inequality, corrected)",
    status="exact",
    params=(TRW, D_DIM, SIG_MAX),
    derive=derive_spectral_lower,
    printed=printed_eq7_first,
    erratum="Eq. 7 prints |tr W| / (sqrt(d) ||Sigma||_2) <= ||W_QK||_2, false: W_QK = Sigma = I_d "
            "gives sqrt(d) <= 1. The sharp constant for the spectral norm is d (von Neumann); "
            "sqrt(d) is the constant for the Frobenius norm (localization.bounds.frobenius_lower), "
            "so the rank-collapse chain of eq. 7 survives from ||W_QK||_F on.",
    doc="|tr(W_QK Sigma)| <= sum_k sigma_k(W_QK) sigma_k(Sigma) <= d ||W_QK||_2 ||Sigma||_2; "
        "equality at W_QK = Sigma = I_d.",
))

register(ClosedForm(
    id="localization.bounds.frobenius_lower",
    title="Lower bound |tr W| / (sqrt(d) ||Sigma||_2) of ||W_QK||_F (and of the entrywise l1 norm)",
    source=f"{PAPER}, eq. 7 (valid version)",
    status="exact",
    params=(TRW, D_DIM, SIG_MAX),
    derive=derive_frobenius_lower,
    printed=printed_eq7_first,
    doc="|<W_QK^T, Sigma>_F| <= ||W_QK||_F ||Sigma||_F <= sqrt(d) ||W_QK||_F ||Sigma||_2; equality at "
        "W_QK = Sigma = I_d. With ||W_QK||_F <= ||W_QK||_1 (entrywise) this is the valid part of eq. 7.",
))

register(ClosedForm(
    id="localization.bounds.frobenius_upper",
    title="Upper bound ||Sigma^-1||_2 sqrt(tr W^2) of ||W_QK||_F (symmetric W_QK)",
    source=f"{PAPER}, eq. 10 (valid chain)",
    status="exact",
    params=(TRW2, SIG_MIN),
    derive=derive_frobenius_upper,
    doc="For symmetric W_QK: ||W_QK||_2 <= ||W_QK||_F <= ||Sigma^-1||_2 sqrt(tr W^2) <= "
        "||Sigma^-1||_F sqrt(tr W^2); the last is eq. 10's end-to-end claim, which survives although "
        "its middle equality sqrt(tr W^2) = ||W||_F is false (localization.eigen.scale).",
))

register(ClosedForm(
    id="localization.entropy.zhai_theorem",
    title="Zhai et al.'s attention-entropy lower bound at finite T",
    source="Zhai et al. 2023, Thm 3.1 (cited as eq. 9 by Bao et al. 2024)",
    status="exact",
    params=(T_LEN, NU),
    derive=zhai_theorem,
    doc="nu = ||W_QK||_2 ||X X^T||_2; a lower bound on the Shannon entropy of each softmax row. "
        "Typed from the cited theorem (the source of eq. 9), not derived here.",
))

register(ClosedForm(
    id="localization.entropy.zhai_bound",
    title="Large-T attention-entropy lower bound ln(1 + T e^-nu) + nu e^-nu / (1/T + e^-nu)",
    source=f"{PAPER}, eq. 9",
    status="asymptotic",
    params=(T_LEN, NU),
    derive=derive_zhai_bound,
    printed=printed_zhai_bound,
    erratum="Eq. 9 prints exp(-nu/2) in the numerator of the second term; then the 'lower bound' "
            "exceeds the maximum entropy ln T (16.7 vs 4.16 at T = 64, nu = 4). Zhai et al.'s "
            "Thm 3.1 gives exp(-nu) at large T, and the bound is then monotonically decreasing "
            "in nu (d/dnu = -nu a/(1 + a)^2, a = T e^-nu), not unimodal as the paper says.",
    doc="Large-T form of localization.entropy.zhai_theorem (T - 1 -> T, sqrt(T/(T-1)) -> 1, "
        "sqrt(T(T-1)) -> T).",
))

register(ClosedForm(
    id="localization.locater.regulariser",
    title="LOCATER regulariser kappa1 ||W_QK||_F^2 + kappa2 (tr W_QK - 1)^2 (A = W_Q, M = W_K)",
    source=f"{PAPER}, Sec. 6",
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
        source=f"{PAPER}, Sec. 6",
        status="exact",
        params=(W_Q, W_K, KAPPA1, KAPPA2),
        derive=lambda _w=_wrt: derive_locater_gradient(_w),
        printed=lambda _w=_wrt: printed_locater_gradient(_w),
        output="matrix",
        erratum=f"The printed mean-term gradient is [tr(W_QK) - 1] tr(W_QK) {_other}; the derivative of "
                f"(tr W_QK - 1)^2 is 2 [tr(W_QK) - 1] {_other}. The scale-term gradient is correct.",
        doc="Gradient in the layout of the matrix (d R / d X_ab at entry ab).",
    ))
