"""Separate key/query linear attention ATTN_S (Zhang, Singh, Latham, Saxe 2025, §4-5, App. E-F).

Model (eq. S): ``yhat = sum_i sum_r v_i beta^T k_ir q_ir^T x_q = beta^T M x_q`` with
``M = sum_{i,r} v_i k_ir q_ir^T``. The loss depends on the weights only through M, so it is
the merged model's L(M) (:mod:`theory.linear_attention.merged`), and G = -1/2 dL/dM is the same matrix; the flow
(eqs. 14, 83) is tau dv_i = sum_r k_ir^T G q_ir, tau dk_ir = v_i G q_ir, tau dq_ir = v_i G^T k_ir.

Derived here:

* fixed points in function space (eqs. 16-18, 59): per eigen-direction d either the
  direction is inactive (m_d = 0) or G's spectral image vanishes, m_d = lambda_d / a_d; a
  subset S of directions gives ``M_S = P_S M*`` with P_S the projector onto
  {e_d : d in S} (2^D of them);
* the loss at a fixed point (eq. 63) from L(M) with M = P_S M* (P_S^2 = P_S), and at the
  ordered saddles S = {1..m} (eq. 19); the exact m-th drop lambda_m^3/a_m (the paper rounds
  it to lambda_m: kept as the printed form, an erratum at finite N);
* the scalar ODE (eq. 21): the ansatz k = q = v e_d makes M gain v^3 e_d e_d^T, and
  tau dv/dt = k^T G q = v^2 g(lambda_d) with g the spectral image of G, written with
  a_d eliminated for tr(Lambda);
* the escape-time estimate (eqs. 71, 76): dsolve of tau dv/dt = lambda^2 v^2 (the small-v
  part of eq. 21) from v(0) = w_init blows up at t = tau/(lambda^2 w_init);
* the loss at a saddle as a function of 1/N, which :mod:`theory.linear_attention.ntp` averages (eq. 26).

Eigen-directions are numbered by descending eigenvalue; the projectors are computed from
an eigendecomposition of Lambda (float64) and passed to the emitted functions.

Contains
--------
``linear_attention.separate.fixed_point_matrix``, ``.fixed_point_gradient``, ``.subset_loss``, ``.saddle_loss``,
``.drop_size``, ``.scalar_ode_rhs``, ``.scalar_ode_time``, ``.ansatz_value_weight``, ``.min_norm_cost``,
``.pcr_limit_matrix``, ``.escape_time``, ``.plateau_duration`` (eq. 76), ``.rank_fixed_point_matrix``
(rank R, eqs. 84-87), ``.conspicuous_plateau_loss`` (rank R, §5, heuristic). The next-token saddles (eq. 26) are
``linear_attention.ntp.saddle_loss`` (:mod:`theory.linear_attention.ntp`).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ..params import Param, covariance, index, positive, subset
from ..registry import ClosedForm, register
from . import merged
from .data import variables

LAMBDA = covariance("Lambda", "Token covariance (eq. 2).")
N_CTX = index("N", "Context length (number of labelled tokens).")
SUBSET = subset("S", "Learned eigen-directions (1-based, descending eigenvalues), eq. 17.")
M_SADDLE = Param("m", "index", "Number of learned directions: the saddle M_m, S = {1..m} (eq. 19).", low=0,
                 sample=(1, "D"))
M_DROP = index("m", "Which drop: from M_{m-1} to M_m.", sample=(1, "D"))
TAU = positive("tau", "Time constant of the gradient flow (eq. 5).")
W_INIT = positive("w_init", "Initial value weight v_m(0) of the head that learns e_m (ansatz, eq. 20).",
                  sample=(1e-8, 1, "log"))


def _sym(name):
    from . import sym

    return sym(name)


# -- eigen-projectors ------------------------------------------------------------------
def eigenvectors_descending(Lam: np.ndarray) -> np.ndarray:
    """Orthonormal eigenvectors of Lambda as columns, by descending eigenvalue (of each matrix of a
    stack ``(S, D, D)``)."""
    w, V = np.linalg.eigh(Lam)
    return np.take_along_axis(V, np.argsort(-w, axis=-1, kind="stable")[..., None, :], axis=-1)


def projector(Lam: np.ndarray, S, backend: str = "numpy"):
    """P_S = sum_{d in S} e_d e_d^T (S 1-based, descending eigenvalues).

    A torch tensor ``Lam`` (the torch backend given a tensor): computed by ``torch.linalg.eigh``
    in float64, in the autograd graph of ``Lam``, so that gradients flow through P. P_S is a
    differentiable function of Lambda where no eigenvalue of S equals one outside S (it is the
    projector onto a sum of eigenspaces); torch's ``eigh`` backward needs all eigenvalues
    distinct, so at a Lambda with a repeated eigenvalue the gradient is not finite.

    ``backend="mpmath"``: an ``mpmath.matrix`` from ``mpmath.eigsy`` at the working precision,
    of ``Lam`` as the mpmath backend gives it (an ``mpmath.matrix`` of the exact input; a float64
    array is taken entry by entry exactly), so that the mpmath backend's records built on P are
    right to that precision rather than to float64's.
    """
    cols = [d - 1 for d in S]
    if type(Lam).__module__.startswith("torch"):
        return _torch_projector(Lam, cols)
    if backend != "mpmath":  # a stack (S, D, D) gives the stack of projectors
        Vs = eigenvectors_descending(Lam)[..., cols]
        return Vs @ np.swapaxes(Vs, -1, -2)
    import mpmath

    if not isinstance(Lam, mpmath.matrix):
        Lam = mpmath.matrix(np.asarray(Lam, dtype=float).tolist())
    w, V = mpmath.eigsy(Lam)
    order = sorted(range(len(w)), key=lambda i: -w[i])
    n = V.rows
    P = mpmath.zeros(n, n)
    for c in cols:
        v = V[:, order[c]]
        P += v * v.T
    return P


def _torch_projector(Lam, cols):
    """:func:`projector` of a torch tensor ``Lam`` (0-based ``cols``), keeping its graph."""
    import torch

    w, V = torch.linalg.eigh(Lam.to(torch.float64))
    order = torch.argsort(-w.detach(), stable=True)
    Vs = V[:, order[list(cols)]] if cols else V[:, :0]
    return Vs @ Vs.T


def _subset_projector(values, dims, backend="numpy"):
    return {"P": projector(values["Lambda"], values["S"], backend)}


def saddle_projector(values, dims, backend="numpy"):
    return {"P": projector(values["Lambda"], range(1, values["m"] + 1), backend)}


def _drop_projectors(values, dims, backend="numpy"):
    m = values["m"]
    return {"P_prev": projector(values["Lambda"], range(1, m), backend),
            "E_m": projector(values["Lambda"], [m], backend)}


def m_at_most_D(values, dims):
    if values["m"] > dims["D"]:
        raise ValueError(f"m: must be <= D = {dims['D']}, got {values['m']}")


# -- derivations -----------------------------------------------------------------------
def _spectral_syms():
    import sympy as sp

    return _sym("lam"), sp.Symbol("m", real=True), sp.Symbol("p", nonnegative=True)


@cache
def active_root():
    """The nonzero per-direction fixed point m_d: the root of G's spectral image (= merged M*)."""
    return merged.converged_eigenvalue()


@cache
def derive_fixed_point_matrix():
    """M_S = P_S f(Lambda), f the active root: inactive directions have m_d = 0 (eq. 59)."""
    return _sym("P") * merged.derive_converged_matrix()


@cache
def derive_fixed_point_gradient():
    """G(M_S) = Lambda^2 - E[Lambda_hat^2] M_S Lambda, simplified through its spectral image
    lambda^2 (1 - p): (I - P_S) Lambda^2 (eq. 60)."""
    import sympy as sp

    from ..matrices import from_spectral

    lam, _, p = _spectral_syms()
    img = sp.expand(fixed_point_gradient_image())
    v = variables()
    on, off = img.coeff(p, 1), img.coeff(p, 0)
    return _sym("P") * from_spectral(on, v.Lam, lam) + from_spectral(off, v.Lam, lam)


def printed_fixed_point_gradient():
    """Eq. 60: sum_{d not in S} lambda_d^2 e_d e_d^T = (I - P_S) Lambda^2."""
    import sympy as sp

    v = variables()
    return (sp.Identity(v.D) - _sym("P")) * v.Lam**2


def fixed_point_gradient_image():
    """Spectral image of G(M_S) with P_S -> p: lambda^2 (1 - p), zero on S (eq. 60)."""
    import sympy as sp

    from ..matrices import spectral

    lam, _, p = _spectral_syms()
    G = merged.derive_gradient().xreplace({_sym("M"): derive_fixed_point_matrix()})
    img = sp.expand(spectral(G, variables().Lam, lam, {_sym("P"): p}))
    return sp.factor(img.replace(lambda x: x.is_Pow and x.base == p, lambda x: p))


@cache
def loss_parts(projector_name="P", inverse_length=False):
    """L(M_S) = tr(F0(Lambda)) + tr(P F1(Lambda)) from the per-direction summand with P^2 = P."""
    import sympy as sp

    from ..matrices import from_spectral, trace_summand

    lam, _, p = _spectral_syms()
    v = variables()
    P = _sym(projector_name)
    M_S = P * merged.derive_converged_matrix()
    loss = merged.derive_loss().xreplace({_sym("M"): M_S})
    s = sp.expand(trace_summand(loss, v.Lam, lam, {P: p}))
    s = s.replace(lambda x: x.is_Pow and x.base == p, lambda x: p)
    s0, s1 = sp.factor(s.coeff(p, 0)), sp.factor(s.coeff(p, 1))
    if inverse_length:
        from .ntp import derive_inv_length_mean

        nu = derive_inv_length_mean()
        s0, s1 = (sp.factor(x.xreplace({v.N: 1 / nu})) for x in (s0, s1))
    return from_spectral(s0, v.Lam, lam), from_spectral(s1, v.Lam, lam)


@cache
def derive_subset_loss():
    """Eq. 63 derived: L(P_S M*)."""
    import sympy as sp

    F0, F1 = loss_parts()
    return sp.Trace(F0) + sp.Trace(_sym("P") * F1)


def stable_subset_loss(inverse_length=False):
    """tr((I - P) Lambda) + tr(P l*(Lambda)) with l* the per-direction minimum (no cancellation
    when L(M_S) is small, e.g. S = {1..D} at large N)."""
    import sympy as sp

    from ..matrices import from_spectral, trace_symbol

    v = variables()
    s = merged.global_min_summand().xreplace({_sym("trLambda"): trace_symbol(1)})
    if inverse_length:
        from .ntp import derive_inv_length_mean

        s = sp.factor(s.xreplace({v.N: 1 / derive_inv_length_mean()}))
    P = _sym("P")
    return sp.Trace((sp.Identity(v.D) - P) * v.Lam) + sp.Trace(P * from_spectral(s, v.Lam, _sym("lam")))


def printed_subset_loss():
    """Eq. 63 (and eq. 19 for S = {1..m}): tr Lambda - sum_{d in S} lambda_d (1 + (1 + tr Lambda/lambda_d)/N)^{-1}."""
    import sympy as sp

    v = variables()
    I = sp.Identity(v.D)
    inner = I + (I + sp.Trace(v.Lam) * sp.Inverse(v.Lam)) / v.N
    return sp.Trace(v.Lam) - sp.Trace(_sym("P") * v.Lam * sp.Inverse(inner))


def printed_fixed_point_matrix():
    """Eq. 18 (= 59): sum_{d in S} lambda_d^{-1} (1 + (1 + tr Lambda/lambda_d)/N)^{-1} e_d e_d^T."""
    import sympy as sp

    v = variables()
    I = sp.Identity(v.D)
    return _sym("P") * sp.Inverse(v.Lam * (I + (I + sp.Trace(v.Lam) * sp.Inverse(v.Lam)) / v.N))


@cache
def derive_drop_size():
    """L(M_{m-1}) - L(M_m) with P_m = P_{m-1} + E_m: tr(E_m F1) with the sign of the drop."""
    import sympy as sp

    _, F1 = loss_parts()
    return -sp.Trace(_sym("E_m") * F1)


def printed_drop_size():
    """§4.3: the m-th drop is "approximately lambda_m" (the N -> infinity value)."""
    import sympy as sp

    return sp.Trace(_sym("E_m") * variables().Lam)


@cache
def derive_scalar_ode_rhs():
    """Eq. 21 from the ansatz k = q = v e_d: tau dv/dt = k^T G q = v^2 g, M gaining v^3 e_d e_d^T;
    a_d = eigenvalue of E[Lambda_hat^2] eliminates tr(Lambda) and N."""
    import sympy as sp

    from ..matrices import spectral

    lam, _, _ = _spectral_syms()
    vv, tau = _sym("v"), _sym("tau")
    g = spectral(merged.derive_gradient(), variables().Lam, lam, {_sym("M"): vv**3})
    return sp.expand(_in_terms_of_a(vv**2 * g) / tau)


def _in_terms_of_a(expr):
    """Eliminate tr(Lambda) for the symbol a = a_d, the eigenvalue of E[Lambda_hat^2] (eq. 32)."""
    import sympy as sp

    from ..matrices import spectral, trace_symbol
    from .data import derive_lambda_hat_sq

    a_of = spectral(derive_lambda_hat_sq(), variables().Lam, _sym("lam"))
    (T,) = sp.solve(sp.Eq(a_of, _sym("a")), trace_symbol(1))
    return sp.expand(expr.xreplace({trace_symbol(1): T}))


@cache
def derive_ansatz_loss_change():
    """Loss change when a head k = q = v e_d adds v^3 e_d e_d^T to M on an unlearned direction:
    l(lambda, v^3) - l(lambda, 0) from the per-direction loss of L(M), a_d eliminating tr(Lambda)."""
    _, m, _ = _spectral_syms()
    vv = _sym("v")
    ell = merged.loss_summand()
    return _in_terms_of_a(ell.xreplace({m: vv**3}) - ell.xreplace({m: 0}))


def printed_scalar_ode_rhs():
    """Eq. 21: tau dv/dt = lambda^2 v^2 - lambda a v^5 (second form, a = a_{m+1})."""
    lam, vv, a, tau = _sym("lam"), _sym("v"), _sym("a"), _sym("tau")
    return (lam**2 * vv**2 - lam * a * vv**5) / tau


@cache
def derive_scalar_ode_time():
    """t(v) - t(v0) along eq. 21: tau/lambda^2 times the integral of dv/(v^2 - (a/lambda) v^5),
    by ``integrate``; the branch log(v - v*) is written log(v* - v) (real for v < v*; the
    constant i pi cancels between the two ends)."""
    import sympy as sp

    v, v0, lam, a, tau = (_sym(n) for n in ("v", "v0", "lam", "a", "tau"))
    u, c = sp.symbols("u c", positive=True)
    F = sp.integrate(1 / (u**2 - c**3 * u**5), u)
    F = F.replace(sp.log, lambda x: sp.log(sp.expand(-x)) if sp.expand(x - (u - 1 / c)) == 0 else sp.log(x))
    cc = (a / lam) ** sp.Rational(1, 3)
    return tau / lam**2 * (F.subs(u, v) - F.subs(u, v0)).subs(c, cc)


def printed_scalar_ode_time():
    """Eq. 70's antiderivative (printed correctly; its integrand is printed with v^2 where it
    should be v^5), between v0 and v, times tau/lambda^2."""
    import sympy as sp

    v, v0, lam, a, tau = (_sym(n) for n in ("v", "v0", "lam", "a", "tau"))
    c = (a / lam) ** sp.Rational(1, 3)

    def F(x):
        return c / 6 * (sp.log((c**2 * x**2 + c * x + 1) / (c**2 * x**2 - 2 * c * x + 1))
                        - 2 * sp.sqrt(3) * sp.atan((2 * c * x + 1) / sp.sqrt(3))) - 1 / x

    return tau / lam**2 * (F(v) - F(v0))


def _below_fixed_point(values, dims):
    import numpy as np

    v_star = (values["lam"] / values["a"]) ** (1 / 3)
    if "v0" in values and np.any(np.asarray(values["v0"]) > np.asarray(values["v"])):
        raise ValueError("v0: must be <= v (time runs forward along eq. 21)")
    if np.any(np.asarray(values["v"]) >= v_star):
        raise ValueError(f"v: must be below the fixed point v* = (lam/a)^(1/3) = {v_star:.6g}")


@cache
def derive_escape_time():
    """Blow-up time of tau dv/dt = lambda_m^2 v^2, v(0) = w_init (the v^2 part of eq. 21)."""
    import sympy as sp

    t, tau, w = _sym("t"), _sym("tau"), _sym("w_init")
    lam = sp.Symbol("lambda_m", positive=True)
    v = sp.Function("v")
    sol = sp.dsolve(sp.Eq(tau * v(t).diff(t), lam**2 * v(t) ** 2), v(t), ics={v(0): w}).rhs
    (t_star,) = sp.solve(sp.Eq(1 / sol, 0), t)
    return t_star.xreplace({lam: sp.Trace(_sym("E_m") * variables().Lam)})


def printed_escape_time():
    """Eqs. 71/76 with v_m(t_{m-1}) = v_m(0) under the ansatz: tau / (lambda_m^2 v_m(0))."""
    import sympy as sp

    return _sym("tau") / (sp.Trace(_sym("E_m") * variables().Lam) ** 2 * _sym("w_init"))


@cache
def derive_plateau_duration():
    """Eq. 76: the blow-up time of tau dv/dt = lambda_m^2 v^2 (eq. 75) from v(t_{m-1}) = v, i.e. the escape
    time's derivation started at the previous drop."""
    return derive_escape_time().xreplace({_sym("w_init"): _sym("v")})


def printed_plateau_duration():
    """Eq. 76 as printed: t_{m+1} - t_m ~ tau / (lambda_{m+1}^2 v_{m+1}(t_m)) (here m + 1 -> m)."""
    import sympy as sp

    return _sym("tau") / (sp.Trace(_sym("E_m") * variables().Lam) ** 2 * _sym("v"))


@cache
def derive_ansatz_value_weight():
    """v* of eq. 20a: the nonzero root of the scalar ODE (eq. 21) with a = a(lambda) (eq. 32)."""
    import sympy as sp

    from .data import derive_lambda_hat_sq, spectral_image

    vv, a = _sym("v"), _sym("a")
    rhs = derive_scalar_ode_rhs()
    roots = [r for r in sp.solve(sp.Eq(rhs, 0), vv) if r != 0 and r.is_positive is not False]
    (root,) = [r for r in roots if r.is_real is not False][:1]
    return root.xreplace({a: spectral_image(derive_lambda_hat_sq())})


@cache
def derive_min_norm_cost():
    """App. E.7 (eqs. 77-80) on one eigen-direction of A: minimise v^2 + k^2 + q^2 subject to v k q = alpha by
    Lagrange (eq. 77 with scalars): the positive stationary point is v = k = q = alpha^{1/3}, cost 3 alpha^{2/3}."""
    import sympy as sp

    alpha = _sym("alpha")
    v, k, q, mult = sp.symbols("v_h k_h q_h M_h", positive=True)
    lagr = (v**2 + k**2 + q**2) / 2 + mult * (alpha - v * k * q)
    (sol,) = sp.solve([lagr.diff(x) for x in (v, k, q, mult)], [v, k, q, mult], dict=True)
    return sp.simplify((v**2 + k**2 + q**2).xreplace(sol))


def stable_ansatz_value_weight():
    """v* = (N / (lambda (N + 1) + tr Lambda))^{1/3} (lambda cancels from the derived root
    lambda^{1/3} (lambda^2 (N+1)/N + lambda tr Lambda/N)^{-1/3}), written with halves:
    ``(N/(2N + 2))^{1/3} (lambda/2 + tr Lambda/(2N + 2))^{-1/3}``. The derived form squares lambda
    (0 at lambda = 1e200: lambda^2 overflows; inf at lambda = 1e-300: it underflows); here every
    intermediate stays within float64 for all positive lambda and tr Lambda (the halves keep the
    sum below the largest float). Equal to :func:`derive_ansatz_value_weight` (symbolic check)."""
    import sympy as sp

    lam, T, N = _sym("lam"), _sym("trLambda"), _sym("N")
    third = sp.Rational(1, 3)
    return N**third / ((2 * N + 2) ** third * (lam / 2 + T / (2 * N + 2)) ** third)


def printed_ansatz_value_weight():
    """Eq. 20a: lambda^{-1/3} (1 + (1 + tr Lambda/lambda)/N)^{-1/3}."""
    import sympy as sp

    lam, T, N = _sym("lam"), _sym("trLambda"), _sym("N")
    return lam ** sp.Rational(-1, 3) * (1 + (1 + T / lam) / N) ** sp.Rational(-1, 3)


def printed_pcr_limit_matrix():
    """Eq. 22's limit as a matrix: P_m Lambda^{-1}."""
    import sympy as sp

    return _sym("P") * sp.Inverse(variables().Lam)


@cache
def derive_pcr_limit_matrix():
    """N -> infinity of M_m (eq. 22): P_m times the limit of the active root."""
    import sympy as sp

    from ..matrices import from_spectral

    lim = sp.limit(active_root(), variables().N, sp.oo)
    return _sym("P") * from_spectral(lim, variables().Lam, _sym("lam"))


def conservation_rates():
    """Eq. 82/88 for one rank-R head (R = 2 written out): tau d/dt (|k_r|^2 - |q_r|^2) and
    tau d/dt (sum_r |k_r|^2 - v^2) under tau dv = sum_r k_r^T G q_r, tau dk_r = v G q_r,
    tau dq_r = v G^T k_r, for any matrix G. Both are identically zero."""
    import sympy as sp

    D = variables().D
    G = sp.MatrixSymbol("G", D, D)
    v = sp.Symbol("v", real=True)
    ks = [sp.MatrixSymbol(f"k_{r}", D, 1) for r in (1, 2)]
    qs = [sp.MatrixSymbol(f"q_{r}", D, 1) for r in (1, 2)]
    dv = sum((k.T * G * q for k, q in zip(ks, qs)), sp.ZeroMatrix(1, 1))
    dk = [v * G * q for q in qs]
    dq = [v * G.T * k for k in ks]
    per_r = [sp.expand((2 * k.T * dk_ - 2 * q.T * dq_).doit()) for k, q, dk_, dq_ in zip(ks, qs, dk, dq)]
    head = sp.expand((sum((2 * k.T * dk_ for k, dk_ in zip(ks, dk)), sp.ZeroMatrix(1, 1)) - 2 * v * dv).doit())
    return per_r, head


# -- registry --------------------------------------------------------------------------
register(ClosedForm(
    id="linear_attention.separate.fixed_point_matrix",
    title="M_S, the effective matrix at the fixed point that has learned the directions S",
    source="eqs. 16-18, 59 (and eq. 22: the PCR predictor at S = {1..m})",
    status="exact",
    params=(LAMBDA, N_CTX, SUBSET),
    derive=derive_fixed_point_matrix,
    printed=printed_fixed_point_matrix,
    output="matrix",
    derived=_subset_projector,
    derived_names=("P",),
    doc="One of the 2^D function-space fixed points; S = {} is the zero point, S = {1..D} the "
        "merged model's global minimum. At M_S the model computes in-context principal component "
        "regression on the directions in S (eq. 22).",
))

register(ClosedForm(
    id="linear_attention.separate.fixed_point_gradient",
    title="G(M_S): the gradient matrix at the fixed point of S (zero on the learned directions)",
    source="eqs. 60-62 (and the exact inactive-head condition, eq. 87)",
    status="exact",
    params=(LAMBDA, N_CTX, SUBSET),
    derive=derive_fixed_point_gradient,
    printed=printed_fixed_point_gradient,
    output="matrix",
    derived=_subset_projector,
    derived_names=("P",),
    doc="Active heads need G q = 0 and G^T k = 0, so k, q lie in span{e_d : d in S}; a head with "
        "v = 0 is stationary exactly when k^T G(M_S) q = 0 (eq. 87), e.g. k = e_3, q = e_4 with "
        "S = {1, 2}: (C3) as printed for rank one is sufficient, not necessary.",
))

register(ClosedForm(
    id="linear_attention.separate.subset_loss",
    title="L(M_S), the loss at the fixed point of the subset S",
    source="eq. 63",
    status="exact",
    params=(LAMBDA, N_CTX, SUBSET),
    derive=derive_subset_loss,
    printed=printed_subset_loss,
    stable=stable_subset_loss,
    derived=_subset_projector,
    derived_names=("P",),
))

register(ClosedForm(
    id="linear_attention.separate.saddle_loss",
    title="L(M_m), the m-th plateau: the top m eigen-directions learned",
    source="eq. 19",
    status="exact",
    params=(LAMBDA, N_CTX, M_SADDLE),
    derive=derive_subset_loss,
    printed=printed_subset_loss,
    stable=stable_subset_loss,
    domain=m_at_most_D,
    derived=saddle_projector,
    derived_names=("P",),
    doc="N -> infinity: the variance of the directions not yet learned, sum_{d>m} lambda_d.",
))

register(ClosedForm(
    id="linear_attention.separate.drop_size",
    title="L(M_{m-1}) - L(M_m), the size of the m-th drop",
    source="§4.3 (drop 'approximately lambda_m'); exact from eq. 19",
    status="exact",
    params=(LAMBDA, N_CTX, M_DROP),
    derive=derive_drop_size,
    printed=printed_drop_size,
    domain=m_at_most_D,
    derived=_drop_projectors,
    derived_names=("P_prev", "E_m"),
    erratum="The paper rounds the m-th drop to lambda_m, its N -> infinity limit; at finite N "
            "it is lambda_m^3/a_m = lambda_m (1 + (1 + tr Lambda/lambda_m)/N)^{-1} (e.g. 0.35942, "
            "not 0.4, for the first drop of the spectrum (0.4, 0.3, 0.2, 0.1) at N = 31).",
))

register(ClosedForm(
    id="linear_attention.separate.scalar_ode_rhs",
    title="Right side of the scalar ODE for the value weight of the head being learned",
    source="eqs. 20-21, 69, 75",
    status="exact",
    params=(Param("v", "nonnegative", "Value weight v_{m+1} (k = q = v e_{m+1})."),
            positive("lam", "Eigenvalue lambda_{m+1}."),
            positive("a", "a_{m+1}, eigenvalue of E[Lambda_hat^2] (eq. 32)."), TAU),
    derive=derive_scalar_ode_rhs,
    printed=printed_scalar_ode_rhs,
    doc="dv/dt; exact on the aligned, balanced manifold k_i = q_i = v_i e_sigma(i), approximate "
        "from a random start. Fixed point v* = (lambda/a)^{1/3} (eq. 20a).",
))

register(ClosedForm(
    id="linear_attention.separate.ansatz_loss_change",
    title="Loss change along the alignment ansatz as the learning head grows",
    source="eqs. 20-21 (loss along the ansatz [derived])",
    status="exact",
    params=(Param("v", "nonnegative", "Value weight of the learning head (k = q = v e_{m+1})."),
            positive("lam", "Eigenvalue lambda_{m+1}."),
            positive("a", "a_{m+1}, eigenvalue of E[Lambda_hat^2] (eq. 32).")),
    derive=derive_ansatz_loss_change,
    doc="L(t) = L(M_m) - 2 lambda^2 v^3 + lambda a v^6; at v = v* it equals the drop "
        "-lambda^3/a, reaching L(M_{m+1}).",
))

register(ClosedForm(
    id="linear_attention.separate.scalar_ode_time",
    title="Time for the value weight to grow from v0 to v along the scalar ODE",
    source="eq. 70 (implicit solution of eq. 21)",
    status="exact",
    params=(positive("v", "Value weight reached (v < v*)."), positive("v0", "Starting value weight."),
            positive("lam", "Eigenvalue lambda_{m+1}."),
            positive("a", "a_{m+1}, eigenvalue of E[Lambda_hat^2] (eq. 32)."), TAU),
    derive=derive_scalar_ode_time,
    printed=printed_scalar_ode_time,
    domain=_below_fixed_point,
    doc="The paper prints the integrand of eq. 70 with v_1^2 where it should read v_1^5; the "
        "antiderivative it gives is right. v(t) has no closed-form inverse.",
))

register(ClosedForm(
    id="linear_attention.separate.ansatz_value_weight",
    title="v*, the value weight (and key/query norm) of a head that has learned e_d",
    source="eq. 20a (= eqs. 80-81 applied to eq. 59: the minimum-norm weights)",
    status="exact",
    params=(positive("lam", "Eigenvalue lambda_d."), positive("trLambda", "Trace of Lambda.", sample=(1, 10)), N_CTX),
    derive=derive_ansatz_value_weight,
    stable=stable_ansatz_value_weight,
    printed=printed_ansatz_value_weight,
    doc="k = q = v* e_d with v* = (lambda_d/a_d)^{1/3}: the nonzero root of eq. 21 and the "
        "minimum-l2-norm factorisation of the fixed point (total cost 3 sum_d (lambda_d/a_d)^{2/3}).",
))

register(ClosedForm(
    id="linear_attention.separate.min_norm_cost",
    title="Minimum l2 cost of one eigen-direction alpha of A in sum_i v_i k_i q_i^T = A (App. E.7)",
    source="App. E.7, eqs. 77-81",
    status="exact",
    params=(positive("alpha", "A nonzero eigenvalue of the PSD matrix A."),),
    derive=derive_min_norm_cost,
    doc="3 alpha^{2/3}: the lemma says min sum_i (v_i^2 + |k_i|^2 + |q_i|^2) over sum_i v_i k_i q_i^T = A is "
        "the sum of this over the eigenvalues of A, reached with rank(A) heads k_i = q_i = v_i e_i, "
        "v_i = alpha_i^{1/3}, and the other heads zero.",
))

register(ClosedForm(
    id="linear_attention.separate.pcr_limit_matrix",
    title="N -> infinity limit of M_m: principal component regression on the top m directions",
    source="eq. 22 (limit)",
    status="asymptotic",
    params=(LAMBDA, M_SADDLE),
    derive=derive_pcr_limit_matrix,
    printed=printed_pcr_limit_matrix,
    domain=m_at_most_D,
    derived=saddle_projector,
    derived_names=("P",),
    output="matrix",
    doc="With beta -> Lambda w the predictor beta^T P_m Lambda^{-1} x_q -> w^T P_m x_q.",
))

register(ClosedForm(
    id="linear_attention.separate.escape_time",
    title="Time of the m-th drop from a small aligned start (leading order)",
    source="eqs. 71, 76",
    status="approximate",
    params=(LAMBDA, N_CTX, M_DROP, TAU, W_INIT),
    derive=derive_escape_time,
    printed=printed_escape_time,
    domain=m_at_most_D,
    derived=lambda values, dims, backend="numpy": {"E_m": projector(values["Lambda"], [values["m"]], backend)},
    derived_names=("E_m",),
    doc="tau/(lambda_m^2 w_init), from the v^2 term of eq. 21 alone; under the ansatz every head "
        "grows from t = 0, so eq. 76 reduces to this. The leading order does not depend on N.",
))

register(ClosedForm(
    id="linear_attention.separate.plateau_duration",
    title="Duration of the plateau before the m-th drop from the value weight at the previous drop (eq. 76)",
    source="eqs. 75-76",
    status="approximate",
    params=(LAMBDA, M_DROP, TAU,
            positive("v", "|v_m(t_{m-1})|: the value weight of the head that learns e_m when drop m - 1 happens.")),
    derive=derive_plateau_duration,
    printed=printed_plateau_duration,
    domain=m_at_most_D,
    derived=lambda values, dims, backend="numpy": {"E_m": projector(values["Lambda"], [values["m"]], backend)},
    derived_names=("E_m",),
    doc="t_m - t_{m-1} ~ tau/(lambda_m^2 v_m(t_{m-1})): eq. 75 (the v^2 term of eq. 21 for the head learning "
        "e_m, aligned and balanced) integrated to its blow-up from the previous drop. From the paper's Gaussian "
        "start the head is neither at t_{m-1}: the ratio to the exact flow is a draw-dependent constant "
        "(linear_attention.alignment.flow_plateau_durations).",
))

# -- rank R (§5, App. F.3-F.4) ----------------------------------------------------------
RANK = index("R", "Rank of each head's key and query (R <= D), eq. S.", sample=(1, "D"))
PLATEAU_J = Param("j", "index", "Which conspicuous plateau: j = 0 .. ceil(D/R) - 1 (the one at "
                  "L(M_{jR})).", low=0, sample=(1, "D"))


def _rank_at_most_D(values, dims):
    if values["R"] > dims["D"]:
        raise ValueError(f"R: must be <= D = {dims['D']}, got {values['R']}")


def _conspicuous_domain(values, dims):
    _rank_at_most_D(values, dims)
    n = -(-dims["D"] // values["R"])
    if values["j"] > n - 1:
        raise ValueError(f"j: must be <= ceil(D/R) - 1 = {n - 1} (D = {dims['D']}, R = {values['R']}), "
                         f"got {values['j']}")


def _conspicuous_projector(values, dims, backend="numpy"):
    return {"P": projector(values["Lambda"], range(1, values["j"] * values["R"] + 1), backend)}


@cache
def rank_stationary_root():
    """The per-direction value of M at a rank-R fixed point, from the stationarity of eq. 83.

    A learned direction e_d is held by piece r of an active head i: k_ir = kappa e_d,
    q_ir = rho e_d (v_i, kappa, rho nonzero), so M's spectral image on e_d is
    m = v kappa rho and G's is g(m) (G = f(Lambda) when M is). The e_d-components of
    tau dk_ir = v_i G q_ir and tau dq_ir = v_i G^T k_ir are v g rho and v g kappa; solving
    both for kappa gives m = v kappa rho, the root of g. The value-weight equation
    tau dv_i = sum_r k_ir^T G q_ir = sum_r kappa_r rho_r g(m_r) then vanishes as well
    (asserted). The rank R and how the directions are shared among the pieces of one head
    do not enter: every piece sees only its own direction's spectral image.
    """
    import sympy as sp

    from ..matrices import spectral

    lam = _sym("lam")
    v, kap, rho = sp.symbols("v kappa rho", real=True, nonzero=True)
    m = v * kap * rho
    g = spectral(merged.derive_gradient(), variables().Lam, lam, {_sym("M"): m})
    sols = sp.solve([v * g * rho, v * g * kap], kap, dict=True)
    roots = {sp.factor(sp.cancel(m.xreplace(s))) for s in sols}
    if len(roots) != 1:
        raise AssertionError(f"rank-R stationarity: expected one nonzero root, got {roots}")
    (root,) = roots
    if sp.simplify(spectral(merged.derive_gradient(), variables().Lam, lam, {_sym("M"): root})) != 0:
        raise AssertionError("rank-R stationarity: the value-weight equation does not vanish")
    return root


@cache
def derive_rank_fixed_point_matrix():
    """M_S for rank-R heads: the stationary root on the directions in S (C2: active pieces
    lie in span{e_d : d in S}), zero elsewhere (inactive heads have v_i = 0)."""
    from ..matrices import from_spectral

    return _sym("P") * from_spectral(rank_stationary_root(), variables().Lam, _sym("lam"))


register(ClosedForm(
    id="linear_attention.separate.rank_fixed_point_matrix",
    title="M_S at a fixed point of rank-R ATTN_S: the same 2^D functions as rank one",
    source="App. F.3, eqs. 84-87",
    status="exact",
    params=(LAMBDA, N_CTX, SUBSET, RANK),
    derive=derive_rank_fixed_point_matrix,
    printed=printed_fixed_point_matrix,
    output="matrix",
    domain=_rank_at_most_D,
    derived=_subset_projector,
    derived_names=("P",),
    doc="Derived from the rank-R stationarity conditions (eq. 83) piece by piece; it does not "
        "depend on R, so the rank-R fixed points are the 2^D functions of eq. 18 (eq. 86). A "
        "subset S is realised by ceil(|S|/R) heads holding up to R directions each with a "
        "shared v_i; a head with v_i = 0 is stationary exactly when sum_r k_ir^T G(M_S) q_ir = 0 "
        "(eq. 87).",
))

register(ClosedForm(
    id="linear_attention.separate.conspicuous_plateau_loss",
    title="Loss L(M_{jR}) of the j-th conspicuous plateau of rank-R ATTN_S",
    source="§5 and App. F.4 (Figs. 4, 11, 12); levels from eq. 19",
    status="heuristic",
    params=(LAMBDA, N_CTX, RANK, PLATEAU_J),
    derive=derive_subset_loss,
    stable=stable_subset_loss,
    domain=_conspicuous_domain,
    derived=_conspicuous_projector,
    derived_names=("P",),
    doc="Every dk_ir/dt, dq_ir/dt carries the head's shared value weight v_i (eq. 83), so a "
        "long plateau happens only while a new head's v_i grows from O(w_init) (an eq.-71 "
        "escape, time ~ tau/(lambda^2 w_init)); the next R - 1 directions are learned inside "
        "that head, whose v_i is already O(1), with brief or no plateaus. With j heads full "
        "(R directions each) the model sits at M_{jR}: the conspicuous plateaus are at "
        "m = 0, R, 2R, ... (m a multiple of R), j = 0 .. ceil(D/R) - 1, and ceil(D/R) heads "
        "end with |v_i| = O(1). The level itself is eq. 19 (exact at the fixed point); which "
        "plateaus are long is the heuristic part (small w_init, distinct eigenvalues). The "
        "paper words it as 'm that divides R' (§5 and the Fig. 11 caption), which is the "
        "wrong way round: the plateaus are at the m that R divides. Measured by the flow "
        "check linear_attention.separate.rank_plateaus.",
))


# -- the query's flow (eq. 83c) ----------------------------------------------------------------
@cache
def derive_query_flow():
    """tau dq_ir/dt = -1/2 dL/dq_ir = v_i E[x_q (y_q - yhat) beta^T] k_ir: yhat = beta^T M x_q with
    M = sum v k q^T gives d yhat / d q_ir = v_i (beta^T k_ir) x_q; the expectation by the Isserlis
    engine, E[x_q x_q^T w w^T Lambda_hat] - E[x_q x_q^T M^T Lambda_hat w w^T Lambda_hat]."""
    from ..gaussian import expectation
    from .data import query_is_token

    v = variables()
    q = [v.x_q.col, v.x_q.row]
    inner = (expectation(*q, v.w.col, v.w.row, v.Lhat)
             - expectation(*q, _sym("M").T, v.Lhat, v.w.col, v.w.row, v.Lhat))
    return _sym("v_i") * query_is_token(inner.doit()) * _sym("k_vec")


def printed_query_flow():
    """Eq. 83c's middle expression: v_i E[beta (y_q - yhat) x_q^T] k_ir = v_i G k_ir (no transpose)."""
    return _sym("v_i") * merged.derive_gradient() * _sym("k_vec")


register(ClosedForm(
    id="linear_attention.separate.query_flow",
    title="tau dq_ir/dt, the flow of a query vector of ATTN_S (eq. 83c)",
    source="eq. 83c (App. F.2) [derived]",
    status="exact",
    params=(LAMBDA, N_CTX, Param("M", "matrix", "Effective matrix M = sum_{i,r} v_i k_ir q_ir^T."),
            Param("v_i", "real", "The head's value weight v_i."),
            Param("k_vec", "vector", "The key k_ir paired with the query.")),
    derive=derive_query_flow,
    printed=printed_query_flow,
    output="vector",
    doc="v_i G^T k_ir with G = linear_attention.merged.gradient (its D x D residual E[(y_q - yhat) beta "
        "x_q^T]); the key's flow is v_i G q_ir. G is not symmetric once M is not, so the transpose matters.",
    erratum="Eq. 83c's middle expression, v_i E[beta (y_q - yhat) x_q^T] k_ir = v_i G k_ir, lacks a "
            "transpose: the query's flow is v_i E[x_q (y_q - yhat) beta^T] k_ir = v_i G^T k_ir (its last "
            "expression, in eq. 14, is right).",
))


# -- the integrand of eq. 70 ---------------------------------------------------------------------
def derive_scalar_ode_integrand():
    """dt/dv = 1 / (dv/dt) along eq. 21 (``scalar_ode_rhs``, derived): the integrand of eq. 70."""
    import sympy as sp

    return sp.cancel(1 / derive_scalar_ode_rhs())


def printed_scalar_ode_integrand():
    """Eq. 70's integrand as printed: tau / (lambda^2 v^2 - lambda a v^2) (v^2 where v^5 belongs)."""
    lam, vv, a, tau = _sym("lam"), _sym("v"), _sym("a"), _sym("tau")
    return tau / (lam**2 * vv**2 - lam * a * vv**2)


register(ClosedForm(
    id="linear_attention.separate.scalar_ode_integrand",
    title="dt/dv along the scalar ODE: the integrand of eq. 70",
    source="eq. 70 (integrand) [derived from eq. 21]",
    status="exact",
    params=(positive("v", "Value weight (v < v*)."), positive("lam", "Eigenvalue lambda_{m+1}."),
            positive("a", "a_{m+1}, eigenvalue of E[Lambda_hat^2] (eq. 32)."), TAU),
    derive=derive_scalar_ode_integrand,
    printed=printed_scalar_ode_integrand,
    domain=_below_fixed_point,
    example=dict(v=0.1, lam=0.3, a=0.15, tau=1.0),  # the printed form divides by lam - a: not at lam = a
    doc="tau / (lambda^2 v^2 - lambda a v^5); its integral from v0 to v is scalar_ode_time, whose printed "
        "antiderivative is right.",
    erratum="Eq. 70 prints the integrand with v^2 where v^5 belongs (tau / (lambda^2 v^2 - lambda a v^2)); the "
            "antiderivative printed next to it integrates the right one.",
))
