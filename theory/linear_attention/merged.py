"""The merged key-query linear attention ATTN_M (Zhang, Singh, Latham, Saxe 2025, §3, App. D).

Model (§2.3, eq. 4): with the blocks v_i, u_i at zero (App. D.1), the prediction is
``yhat = sum_i v_i beta^T U_i x_q = beta^T M x_q`` with the effective matrix
``M = sum_i v_i U_i`` (D x D). Equivalently a two-layer linear network
``w2^T W1 z`` on the cubic feature ``z = vec(beta x_q^T)`` (eqs. 6-7), ``w2^T W1 = vec(M)^T``.

Loss ``L = E(y_q - yhat)^2`` (no 1/2) and gradient flow ``tau dW/dt = -1/2 dL/dW`` (eq. 5);
gradient descent with learning rate eta advances ``t/tau = 2 eta`` per step.

What is derived here (not retyped):

* ``loss``: L(M) from the Isserlis engine, E[y_q^2] - 2 E[y_q yhat] + E[yhat^2];
* ``gradient``: G = -1/2 dL/dM = E[(y_q - yhat) beta x_q^T] (eq. 5 -> eq. 8 in D x D form);
* ``converged_matrix``: G = 0 solved per eigen-direction under the ansatz M = f(Lambda),
  then shown stationary for the full problem (:func:`stationarity_residual`); the loss is
  a convex quadratic with Hessian Lambda (x) E[Lambda_hat^2] > 0, so it is the global minimum;
* ``global_min_loss``: L(M*) summed over eigen-directions, simplified to a form without
  cancellation (finite and accurate at N = 1e9);
* ``sigma``: the logistic ODE tau ds/dt = 2 s (gamma - alpha s) (eq. 48) solved by ``dsolve``,
  with gamma = ||E[y_q z]|| and alpha = the eigenvalue of E[z z^T] at Lambda = I taken from
  the data moments (eq. 50); sigma = s / gamma (eq. 49);
* ``plateau_time``: the linearised flow tau ds/dt = 2 gamma s solved until s = 1 (eqs. 52-54).

Contains
--------
``linear_attention.merged.loss``, ``.gradient``, ``.zero_loss``, ``.converged_matrix``,
``.converged_matrix_limit``, ``.global_min_loss``, ``.gamma``, ``.sigma``, ``.sigma_infinity``,
``.white_loss``, ``.half_rise_time``, ``.plateau_time``.
"""

from __future__ import annotations

from functools import cache

from ..params import covariance, index, matrix, nonnegative, positive
from ..registry import ClosedForm, register
from .data import beta_row_word, beta_word, derive_lambda_hat_sq, derive_yq_z, query_is_token, variables, yq_word

LAMBDA = covariance("Lambda", "Token covariance (eq. 2).")
N_CTX = index("N", "Context length (number of labelled tokens).")
M_EFF = matrix("M", "Effective matrix M = sum_i v_i U_i.")
T = nonnegative("t", "Time.", sample=(0, 20))
TAU = positive("tau", "Time constant of the gradient flow (eq. 5).")
D_DIM = index("D", "Token dimension (white covariance Lambda = I_D).", sample=(1, 9))
W_INIT = positive("w_init", "Initial norm of each layer: s(0) = ||w2(0)||^2 = w_init^2.",
                  sample=(1e-8, 1, "log"))


def _sym(name):
    from . import sym

    return sym(name)


def yhat_word():
    """yhat = beta^T M x_q = w^T Lambda_hat M x_q."""
    v = variables()
    return [*beta_row_word(), _sym("M"), v.x_q.col]


# -- loss and gradient ---------------------------------------------------------------
@cache
def derive_loss():
    """L(M) = E[y_q^2] - 2 E[y_q yhat] + E[yhat^2] (each term by the Isserlis engine)."""
    from ..gaussian import expectation

    yy = expectation(*yq_word(), *_transpose_word(yq_word()))
    yh = expectation(*yq_word(), *yhat_word())
    hh = expectation(*yhat_word(), *yhat_word())
    return query_is_token(yy - 2 * yh + hh)


def _transpose_word(word):
    from .data import reversed_scalar

    return reversed_scalar(word)


@cache
def derive_gradient():
    """G = -1/2 dL/dM = E[y_q beta x_q^T] - E[beta beta^T M x_q x_q^T] (eq. 5 with
    d yhat / dM = beta x_q^T); the D x D form of eq. 8."""
    from ..gaussian import expectation

    v = variables()
    target = expectation(*beta_word(), v.w.row, v.x_q.col, v.x_q.row)  # beta x_q^T y_q
    fitted = expectation(*beta_word(), *beta_row_word(), _sym("M"), v.x_q.col, v.x_q.row)
    return query_is_token(target - fitted)


# -- fixed points --------------------------------------------------------------------
def _spectral_symbols():
    import sympy as sp

    return _sym("lam"), sp.Symbol("m", real=True)


@cache
def converged_eigenvalue():
    """m*(lambda): the root of the spectral image of G under M = f(Lambda)."""
    import sympy as sp

    from ..matrices import spectral

    lam, m = _spectral_symbols()
    g = spectral(derive_gradient(), variables().Lam, lam, {_sym("M"): m})
    (root,) = sp.solve(g, m)
    return sp.factor(root)


@cache
def derive_converged_matrix():
    from ..matrices import from_spectral

    return from_spectral(converged_eigenvalue(), variables().Lam, _sym("lam"))


def stationarity_residual():
    """Spectral image of G(M*) (must be 0: M* is stationary for the full problem)."""
    import sympy as sp

    from ..matrices import spectral

    v = variables()
    G = derive_gradient().xreplace({_sym("M"): derive_converged_matrix()})
    return sp.simplify(spectral(G, v.Lam, _sym("lam")))


@cache
def loss_summand(m=None):
    """Per-eigen-direction loss l(lambda, m) for M = f(Lambda): L = sum_d l(lambda_d, m_d)."""
    from ..matrices import trace_summand

    lam, msym = _spectral_symbols()
    return trace_summand(derive_loss(), variables().Lam, lam, {_sym("M"): msym if m is None else m})


@cache
def global_min_summand():
    import sympy as sp

    from ..matrices import trace_symbol

    s = sp.factor(sp.cancel(loss_summand(converged_eigenvalue())))
    return s.xreplace({trace_symbol(1): _sym("trLambda")})


@cache
def derive_global_min_loss():
    import sympy as sp

    from ..matrices import from_spectral, trace_symbol

    s = global_min_summand().xreplace({_sym("trLambda"): trace_symbol(1)})
    return sp.Trace(from_spectral(s, variables().Lam, _sym("lam")))


def printed_converged_matrix():
    """Eq. 11: (Lambda + (Lambda + tr(Lambda) I)/N)^{-1}."""
    import sympy as sp

    v = variables()
    return sp.Inverse(v.Lam + (v.Lam + sp.Trace(v.Lam) * sp.Identity(v.D)) / v.N)


def printed_global_min_loss():
    """Eq. 19 with m = D: tr(Lambda) - sum_d lambda_d (1 + (1 + tr(Lambda)/lambda_d)/N)^{-1}."""
    import sympy as sp

    v = variables()
    I = sp.Identity(v.D)
    inner = I + (I + sp.Trace(v.Lam) * sp.Inverse(v.Lam)) / v.N
    return sp.Trace(v.Lam) - sp.Trace(v.Lam * sp.Inverse(inner))


@cache
def derive_converged_matrix_limit():
    """N -> infinity limit of M* (§3.4), taken on the eigenvalue function."""
    import sympy as sp

    from ..matrices import from_spectral

    lim = sp.limit(converged_eigenvalue(), variables().N, sp.oo)
    return from_spectral(lim, variables().Lam, _sym("lam"))


# -- white covariance: the sigmoid (App. D.5) -----------------------------------------
@cache
def white_constants():
    """gamma and alpha of eq. 50, computed from the derived moments at Lambda = I_D."""
    import sympy as sp

    v = variables()
    I = sp.Identity(v.D)
    Y = derive_yq_z().arg.xreplace({v.Lam: I, v.Lam_q: I}).doit()   # E[y_q beta x_q^T]
    gamma = sp.sqrt(sp.Trace(Y.T * Y).doit())
    a = derive_lambda_hat_sq().xreplace({v.Lam: I}).doit()            # E[Lambda_hat^2] = a I
    alpha = sp.simplify(sp.Trace(a).doit() / v.D)                     # E[z z^T] = I (x) a I
    return sp.simplify(gamma), sp.factor(alpha)


@cache
def logistic_solution():
    """s(t) solving tau ds/dt = 2 s (gamma - alpha s), s(0) = s0 (eq. 48), by dsolve."""
    import sympy as sp

    t, tau = _sym("t"), _sym("tau")
    g, a, s0 = sp.symbols("gamma alpha s_0", positive=True)
    s = sp.Function("s")
    sol = sp.dsolve(sp.Eq(tau * s(t).diff(t), 2 * s(t) * (g - a * s(t))), s(t), ics={s(0): s0})
    return sp.simplify(sol.rhs), (g, a, s0)


@cache
def derive_sigma():
    """sigma(t) = s(t)/gamma with gamma, alpha of eq. 50 and s0 = w_init^2 (eq. 10)."""
    s, (g, a, s0) = logistic_solution()
    gamma, alpha = white_constants()
    return (s / g).subs({g: gamma, a: alpha, s0: _sym("w_init") ** 2})


def printed_sigma():
    """Eq. 10 as printed."""
    import sympy as sp

    t, tau, D, N, w = (_sym(n) for n in ("t", "tau", "D", "N", "w_init"))
    E = sp.exp(2 * sp.sqrt(D) * t / tau)
    return E / ((1 + (1 + D) / N) * (E - 1) + sp.sqrt(D) / w**2)


def _log_c():
    """ln c for c = alpha w_init^2/sqrt(D), the start sigma(0) = w_init^2/sqrt(D) in units of
    sigma(inf) = 1/alpha, as a sum of logarithms: w_init^2 itself underflows to 0 below
    w_init ~ 1e-162 while ln c stays finite."""
    import sympy as sp

    D, N, w = (_sym(n) for n in ("D", "N", "w_init"))
    alpha = 1 + (1 + D) / N
    return sp.log(alpha) + 2 * sp.log(w) - sp.log(D) / 2


def _exp_unfolded(arg):
    """exp(arg) with the argument kept whole: sympy would fold exp(x + ln c) back into
    c e^x (reintroducing the underflowing w_init^2), so the argument is an UnevaluatedExpr."""
    import sympy as sp

    return sp.exp(sp.UnevaluatedExpr(arg))


def stable_sigma():
    """Eq. 10 as sigma = 1/(alpha (1 - e^{-x}) + exp(-x - ln c) alpha), x = 2 sqrt(D) t/tau,
    with ln c from :func:`_log_c`: no w_init^2 (which underflows for w_init < ~1e-162, where the
    printed form gives 0/0) and no e^{+x} (which overflows for t > ~350 tau/sqrt(D)). The
    exponential is at most sqrt(D)/(alpha w_init^2), so sigma underflows to 0 only where its
    true value is below ~1e-308."""
    import sympy as sp
    from sympy.codegen.cfunctions import expm1

    t, tau, D, N = (_sym(n) for n in ("t", "tau", "D", "N"))
    x = 2 * sp.sqrt(D) * t / tau
    alpha = 1 + (1 + D) / N
    return 1 / (alpha * (-expm1(-x) + _exp_unfolded(-x - _log_c())))


@cache
def derive_sigma_infinity():
    import sympy as sp

    return sp.simplify(sp.limit(derive_sigma(), _sym("t"), sp.oo))


@cache
def derive_white_loss():
    """L(t) at Lambda = I and M = sigma(t) I, from the derived L(M) (eq. 51)."""
    import sympy as sp

    from ..matrices import trace_symbol

    v = variables()
    sig = sp.Symbol("sigma", positive=True)
    lam, _ = _spectral_symbols()
    # Lambda = I: every eigen-direction has lambda = 1, tr(Lambda) = D, and M = sigma I
    per_direction = loss_summand(sig).xreplace({lam: 1, trace_symbol(1): v.D})
    return (v.D * sp.factor(per_direction)).subs(sig, derive_sigma())


def printed_white_loss():
    """Eq. 51: (1 - 2 sigma + (1 + (1+D)/N) sigma^2) D, with the printed sigma."""
    D, N = _sym("D"), _sym("N")
    s = printed_sigma()
    return (1 - 2 * s + (1 + (1 + D) / N) * s**2) * D


def stable_white_loss():
    """Eq. 51, L = D (r^2/alpha + (alpha - 1)/alpha) with r = 1 - alpha sigma, and r written
    without cancellation, underflow or overflow: from eq. 10,
    r = (1 - c)/(1 - c + exp(x + ln c)), c = alpha w_init^2/sqrt(D), x = 2 sqrt(D) t/tau.
    c may underflow to 0 harmlessly (it only enters next to 1); ln c (:func:`_log_c`) is a sum of
    logarithms, finite for w_init down to the smallest float; exp(x + ln c) may overflow to inf,
    which gives the correct limit r = 0. So L is finite for every t >= 0 and w_init in
    (0, 1e154]; larger w_init are refused (:func:`white_loss_domain`)."""
    import sympy as sp

    t, tau, D, N, w = (_sym(n) for n in ("t", "tau", "D", "N", "w_init"))
    x = 2 * sp.sqrt(D) * t / tau
    alpha = 1 + (1 + D) / N
    c = alpha * w**2 / sp.sqrt(D)
    r = sp.UnevaluatedExpr((1 - c) / (1 - c + _exp_unfolded(x + _log_c())))  # squared whole
    return D * (r**2 / alpha + ((1 + D) / N) / alpha)


@cache
def derive_half_rise_time():
    """t_1/2 solving sigma(t) = sigma(inf)/2 [derived]."""
    import sympy as sp

    t = _sym("t")
    sols = sp.solve(sp.Eq(derive_sigma(), derive_sigma_infinity() / 2), t)
    real = [s for s in sols if s.is_real is not False]
    return sp.simplify(real[0])


def stable_half_rise_time():
    """tau/(2 sqrt D) (log(sqrt D/(alpha w^2)) + log1p(-alpha w^2/sqrt D))."""
    import sympy as sp
    from sympy.codegen.cfunctions import log1p

    tau, D, N, w = (_sym(n) for n in ("tau", "D", "N", "w_init"))
    alpha = 1 + (1 + D) / N
    return tau / (2 * sp.sqrt(D)) * (sp.log(sp.sqrt(D)) - sp.log(alpha) - 2 * sp.log(w)
                                     + log1p(-alpha * w**2 / sp.sqrt(D)))


# -- plateau (App. D.6.1) ------------------------------------------------------------
@cache
def derive_gamma():
    """gamma = ||E[y_q z]|| (eq. 53), from the derived E[y_q z] = vec(Y): sqrt(tr(Y^T Y))."""
    import sympy as sp

    Y = query_is_token(derive_yq_z()).arg
    return sp.sqrt(sp.Trace(sp.Transpose(Y) * Y))


def printed_gamma():
    """Eq. 53: ||Lambda^2||_F."""
    import sympy as sp

    Lam = variables().Lam
    return sp.sqrt(sp.Trace(Lam**4))


@cache
def derive_plateau_time():
    """Linearised flow tau ds/dt = 2 gamma s (eq. 52): s = s0 exp(2 gamma t/tau), run until
    s = 1 (ln s(t) neglected against ln s(0)), with s0 = w_init^2."""
    import sympy as sp

    t, tau, w = _sym("t"), _sym("tau"), _sym("w_init")
    g, s0 = sp.symbols("gamma s_0", positive=True)
    s = sp.Function("s")
    sol = sp.dsolve(sp.Eq(tau * s(t).diff(t), 2 * g * s(t)), s(t), ics={s(0): s0}).rhs
    (t_end,) = sp.solve(sp.Eq(sol, 1), t)
    return sp.expand_log(t_end.subs({s0: w**2}), force=True).subs(g, derive_gamma())


def printed_plateau_time():
    """Eq. 54 (main text, §3.3): tau / ||Lambda^2|| ln(1/w_init)."""
    import sympy as sp

    return _sym("tau") / printed_gamma() * sp.log(1 / _sym("w_init"))


def derive_zero_loss():
    """L(0): the loss of the zero output (eq. 9a)."""
    import sympy as sp

    return derive_loss().xreplace({_sym("M"): sp.ZeroMatrix(*_sym("M").shape)}).doit()


def printed_trace():
    import sympy as sp

    return sp.Trace(variables().Lam)


def printed_inverse():
    import sympy as sp

    return sp.Inverse(variables().Lam)


def printed_sigma_infinity():
    """sigma(inf) = 1/alpha = N/(N + 1 + D)."""
    N, D = _sym("N"), _sym("D")
    return N / (N + 1 + D)


def half_rise_domain(values: dict, dims: dict) -> None:
    """sigma must start below sigma(inf): (1 + (1+D)/N) w_init^2 < sqrt(D)."""
    import numpy as np

    alpha = 1 + (1 + values["D"]) / values["N"]
    if np.any(alpha * np.asarray(values["w_init"]) ** 2 >= np.sqrt(values["D"])):
        raise ValueError("w_init: half_rise_time needs (1 + (1+D)/N) w_init^2 < sqrt(D), "
                         "i.e. sigma(0) below sigma(infinity)")


#: Largest w_init whose square is a finite float64 (eq. 51 needs c = alpha w_init^2/sqrt(D)).
W_INIT_MAX_WHITE_LOSS = 1e154


def white_loss_domain(values: dict, dims: dict) -> None:
    """w_init^2 must be a finite float64: beyond w_init ~ 1.3e154 the start c of
    :func:`stable_white_loss` is inf and r = (1 - c)/(1 - c + c e^x) is inf/inf."""
    import numpy as np

    if np.any(np.asarray(values["w_init"]) > W_INIT_MAX_WHITE_LOSS):
        raise ValueError(f"w_init: must be <= {W_INIT_MAX_WHITE_LOSS:g} for white_loss (w_init^2 "
                         f"overflows float64 beyond), got {values['w_init']!r}")


def printed_half_rise_time():
    """The half-rise time as read off eq. 10's sigmoid: t_1/2 = tau/(2 sqrt D) ln(sqrt(D)/(alpha w_init^2) - 1)."""
    import sympy as sp

    tau, D, N, w = (_sym(n) for n in ("tau", "D", "N", "w_init"))
    return tau / (2 * sp.sqrt(D)) * sp.log(sp.sqrt(D) / ((1 + (1 + D) / N) * w**2) - 1)


# -- the two-layer form: conservation law and critical sets (eqs. 8, 9, 55) -----------
def two_layer_flow():
    """Eq. 8 for the equivalent network with w2 (H x 1) and W1 (H x K), K = D^2:
    tau dW1/dt = w2 r, tau dw2/dt = W1 r^T with the residual row r = E[y_q z^T] - w2^T W1 E[z z^T].

    Returns ``(w2, W1, b, A, dW1, dw2)`` as matrix expressions (b = E[y_q z], A = E[z z^T]).
    """
    import sympy as sp

    H, K = sp.symbols("H K", integer=True, positive=True)
    w2, W1 = sp.MatrixSymbol("w_2", H, 1), sp.MatrixSymbol("W_1", H, K)
    b, A = sp.MatrixSymbol("b", K, 1), sp.MatrixSymbol("A", K, K)
    r = b.T - w2.T * W1 * A
    return w2, W1, b, A, w2 * r, W1 * r.T


def conservation_rate():
    """d/dt (w2 w2^T - W1 W1^T) under eq. 8, times tau: identically the zero matrix (eq. 55)."""
    import sympy as sp

    w2, W1, b, A, dW1, dw2 = two_layer_flow()
    rate = dw2 * w2.T + w2 * dw2.T - (dW1 * W1.T + W1 * dW1.T)
    return sp.expand(rate.doit()).doit()


def zero_output_critical_set():
    """With w2 = 0 the flow (eq. 8) reduces to tau dW1/dt = 0, tau dw2/dt = W1 b: the critical
    points with zero output are {w2 = 0, W1 b = 0}, larger than eq. 9a's W1 = 0.

    Returns the two right-hand sides at w2 = 0.
    """
    import sympy as sp

    w2, W1, b, A, dW1, dw2 = two_layer_flow()
    zero = sp.ZeroMatrix(*w2.shape)
    return dW1.xreplace({w2: zero}).doit(), dw2.xreplace({w2: zero}).doit()


# -- registry ------------------------------------------------------------------------
register(ClosedForm(
    id="linear_attention.merged.loss",
    title="Population loss L(M) of the merged model with effective matrix M",
    source="§2.5 and App. D.2 (D x D form [derived])",
    status="exact",
    params=(LAMBDA, N_CTX, M_EFF),
    derive=derive_loss,
    output="scalar",
    doc="L(M) = tr(Lambda) - 2 tr(Lambda M Lambda) + tr(M Lambda M^T E[Lambda_hat^2]); "
        "depends on the weights only through M = sum_i v_i U_i.",
))

register(ClosedForm(
    id="linear_attention.merged.gradient",
    title="G = -1/2 dL/dM, the right-hand side of the gradient flow in D x D form",
    source="eqs. 5, 8 (D x D form [derived])",
    status="exact",
    params=(LAMBDA, N_CTX, M_EFF),
    derive=derive_gradient,
    output="matrix",
    doc="Eq. 8 reads tau dU_i/dt = v_i G, tau dv_i/dt = <U_i, G>_F; G is vec^{-1} of the "
        "residual row E[y_q z^T] - w2^T W1 E[z z^T]. Never forms the D^2 x D^2 matrix.",
))

register(ClosedForm(
    id="linear_attention.merged.zero_loss",
    title="Loss at the zero fixed point M = 0 (eq. 9a)",
    source="eq. 9a",
    status="exact",
    params=(LAMBDA,),
    derive=derive_zero_loss,
    printed=printed_trace,
    doc="In parameter space the zero-output critical set is {w2 = 0, W1 vec(Lambda^2) = 0}, "
        "larger than eq. 9a's {w2 = 0, W1 = 0}; in function space it is M = 0.",
))

register(ClosedForm(
    id="linear_attention.merged.converged_matrix",
    title="M*, the effective matrix at the global minimum",
    source="eqs. 9b, 11, 46",
    status="exact",
    params=(LAMBDA, N_CTX),
    derive=derive_converged_matrix,
    printed=printed_converged_matrix,
    output="matrix",
    doc="The converged model computes beta^T M* x_q: approximately in-context least squares "
        "with the population Lambda in place of Lambda_hat.",
))

register(ClosedForm(
    id="linear_attention.merged.converged_matrix_limit",
    title="N -> infinity limit of M*: the inverse covariance",
    source="§3.4 (unnumbered limit)",
    status="asymptotic",
    params=(LAMBDA,),
    derive=derive_converged_matrix_limit,
    printed=printed_inverse,
    output="matrix",
))

register(ClosedForm(
    id="linear_attention.merged.global_min_loss",
    title="L(M*), the loss at the global minimum",
    source="eq. 19 with m = D (identified with the ATTN_M minimum)",
    status="exact",
    params=(LAMBDA, N_CTX),
    derive=derive_global_min_loss,
    printed=printed_global_min_loss,
    doc="Summand form sum_d (lambda_d + tr Lambda) / (N + 1 + tr(Lambda)/lambda_d): no "
        "cancellation at large N. White Lambda = I: D (1 + D)/(N + 1 + D).",
))

register(ClosedForm(
    id="linear_attention.merged.gamma",
    title="gamma = ||E[y_q z]||, the growth rate of the linearised flow",
    source="eq. 53",
    status="exact",
    params=(LAMBDA,),
    derive=derive_gamma,
    printed=printed_gamma,
    doc="Frobenius norm ||Lambda^2||_F (the paper writes ||Lambda^2||).",
))

register(ClosedForm(
    id="linear_attention.merged.sigma",
    title="sigma(t): the merged model computes sigma(t) beta^T x_q (white covariance)",
    source="eq. 10 (App. D.5, eqs. 47-50)",
    status="exact",
    params=(T, TAU, D_DIM, N_CTX, W_INIT),
    derive=derive_sigma,
    printed=printed_sigma,
    stable=stable_sigma,
    doc="Exact gradient-flow solution for Lambda = I_D and a balanced, aligned start "
        "W1(0) = w2(0) m^T with ||w2(0)||^2 = w_init^2. From the random start of eq. 34 it is "
        "shifted later in time; replacing w_init^2 by s_eff = ||(w2(0) + W1(0) m)/2||^2 "
        "restores it.",
))

register(ClosedForm(
    id="linear_attention.merged.sigma_infinity",
    title="sigma(infinity) = 1/alpha = N/(N + 1 + D)",
    source="eq. 10 at t -> infinity (= eq. 11 for Lambda = I)",
    status="exact",
    params=(D_DIM, N_CTX),
    derive=derive_sigma_infinity,
    printed=printed_sigma_infinity,
))

register(ClosedForm(
    id="linear_attention.merged.white_loss",
    title="L(t) for white covariance along the sigmoid of eq. 10",
    source="eq. 51",
    status="exact",
    params=(T, TAU, D_DIM, N_CTX, W_INIT),
    derive=derive_white_loss,
    printed=printed_white_loss,
    stable=stable_white_loss,
    domain=white_loss_domain,
))

register(ClosedForm(
    id="linear_attention.merged.half_rise_time",
    title="t_1/2: time at which sigma reaches half its final value",
    source="from eq. 10 [derived]",
    status="exact",
    params=(TAU, D_DIM, N_CTX, W_INIT),
    derive=derive_half_rise_time,
    printed=printed_half_rise_time,
    stable=stable_half_rise_time,
    domain=half_rise_domain,
))

register(ClosedForm(
    id="linear_attention.merged.plateau_time",
    title="Plateau duration: escape time from the zero fixed point",
    source="eq. 54 (§3.3)",
    status="asymptotic",
    params=(LAMBDA, TAU, W_INIT),
    derive=derive_plateau_time,
    printed=printed_plateau_time,
    doc="Leading order in ln(1/w_init): the slope d t / d ln(1/w_init) = tau/||Lambda^2||_F "
        "is exact asymptotically; the intercept carries an O(tau/gamma) offset not predicted.",
))
