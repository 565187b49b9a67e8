"""The single-layer optimum of Ahn, Cheng, Daneshmand, Sra 2023 (Theorem 1, eqs. 6-7).

Model (§2, App. A.1). Covariates ``x^(1..n+1) ~ N(0, Sigma)`` i.i.d., task vector
``w* ~ N(0, I)`` independent, noiseless labels ``y^(i) = <x^(i), w*>``. With
``P_0 = E_{d+1,d+1}`` and ``Q_0 = -[[A, 0], [0, 0]]`` (the sparse form of eq. 8, minus
sign included) one layer outputs ``[Z_1]_{d+1,n+1} = -h^T A x_q``, so the prediction
``TF_1 = -[Z_1]_{d+1,n+1}`` is ``yhat = h^T A x_q`` with ``h = (1/n) sum_i y^(i) x^(i) = S w*``
and ``S = (1/n) sum_i x^(i) x^(i)T``. The loss is ``f = E(yhat - y_q)^2`` (eq. 5 with its sign
typo corrected; no 1/2). By App. A.1 (eq. 15) every single-layer ``(P, Q)`` predicts
``b^T G A' x_q``; the block ``A`` of this record is the ``d x d`` matrix of the optimum.

What is derived here (not retyped):

* ``loss``: f(A) = E[y_q^2] - 2 E[y_q yhat] + E[yhat^2], each term by the Isserlis engine
  (:mod:`theory.gaussian`), i.e. tr Sigma - 2 tr(Sigma A^T Sigma) + tr(Sigma A^T E[S^2] A);
* ``optimal_preconditioner``: the gradient ``-1/2 df/dA = E[h (y_q - yhat) x_q^T]`` (engine)
  solved per eigen-direction under the ansatz A = g(Sigma) (spectral map,
  :mod:`theory.matrices`); the gradient at the solution is a function of Sigma whose spectral
  image vanishes, so it is zero, and f is a convex quadratic with Hessian
  Sigma (x) E[S^2] > 0, so the stationary point is the unique global minimum over A;
* ``optimal_preconditioner_isotropic``: the eigenvalue function of the optimum at Sigma = I;
* ``optimal_loss``: f at the optimum, summed over eigen-directions (the paper does not state it);
* ``optimal_preconditioner_inverse_task``, ``optimal_loss_inverse_task``: the same steps for the
  data model of Theorems 3-4, ``w* ~ N(0, Sigma^{-1})`` (E[S Sigma^{-1} S] from the
  engine).

The same optimum is the converged matrix of the merged linear attention of Zhang, Singh,
Latham, Saxe 2025 (eq. 11, ``linear_attention.merged.converged_matrix``) with Lambda = Sigma and
N = n: both papers use the same data model, h is their beta, and both losses have no 1/2
(:func:`one_theory_identities`).

Contains
--------
``preconditioned_gd.single_layer.loss``, ``.in_context_loss`` (eq. 5, sign corrected; the printed
"+" kept as its erratum), ``.optimal_preconditioner``,
``.optimal_preconditioner_isotropic``, ``.optimal_loss``,
``.optimal_preconditioner_inverse_task``, ``.optimal_loss_inverse_task``.

References
----------
.. [1] K. Ahn, X. Cheng, H. Daneshmand, S. Sra, "Transformers learn to implement
   preconditioned gradient descent for in-context learning", NeurIPS 2023, Theorem 1,
   eqs. 6, 7, 15 and App. A.
"""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace

from ..params import covariance, index, matrix
from ..registry import ClosedForm, register

SIGMA = covariance("Sigma", "Covariance of the covariates x ~ N(0, Sigma).")
N_CTX = index("n", "Context length (labelled examples; the query excluded).", low=1)
D_DIM = index("d", "Covariate dimension (isotropic case Sigma = I_d).", low=1, sample=(1, 9))
A_PRE = matrix("A", "Preconditioner: Q_0 = -[[A, 0], [0, 0]], P_0 = E_{d+1,d+1}.")


@cache
def variables(task: str = "identity") -> SimpleNamespace:
    """The random variables as engine objects: ``task`` "identity" draws w* ~ N(0, I) (Theorem 1),
    "inverse" draws w* ~ N(0, Sigma^{-1}) (the model of Theorems 3-4)."""
    import sympy as sp

    from ..gaussian import Gaussian, SampleCovariance
    from ..symbols import dim
    from . import sym

    D, Sig, n = dim(), sym("Sigma"), sym("n")
    x = Gaussian("x", Sig)
    x_q = Gaussian("x_q", Sig)
    w = Gaussian("w", sp.Identity(D) if task == "identity" else sp.Inverse(Sig))
    S = SampleCovariance(x, n)
    return SimpleNamespace(D=D, n=n, Sig=Sig, A=sym("A"), x=x, x_q=x_q, w=w, S=S)


def _lam():
    import sympy as sp

    return sp.Symbol("lambda", positive=True)


# -- loss and gradient -----------------------------------------------------------------
@cache
def derive_loss(task: str = "identity"):
    """f(A) = E[y_q^2] - 2 E[y_q yhat] + E[yhat^2] with yhat = w^T S A x_q, y_q = w^T x_q."""
    from ..gaussian import expectation

    v = variables(task)
    yy = expectation(v.w.row, v.x_q.col, v.x_q.row, v.w.col)
    yh = expectation(v.x_q.row, v.w.col, v.w.row, v.S, v.A, v.x_q.col)
    hh = expectation(v.w.row, v.S, v.A, v.x_q.col, v.x_q.row, v.A.T, v.S, v.w.col)
    return yy - 2 * yh + hh


def printed_loss_eq5():
    """Eq. 5 as printed at L = 1: ``E(TF_1 + w*^T x_q)^2`` with ``TF_1 = yhat`` (the "+" read
    literally), i.e. ``E[y_q^2] + 2 E[y_q yhat] + E[yhat^2]`` (the same engine terms as :func:`derive_loss`)."""
    from ..gaussian import expectation

    v = variables()
    yy = expectation(v.w.row, v.x_q.col, v.x_q.row, v.w.col)
    yh = expectation(v.x_q.row, v.w.col, v.w.row, v.S, v.A, v.x_q.col)
    hh = expectation(v.w.row, v.S, v.A, v.x_q.col, v.x_q.row, v.A.T, v.S, v.w.col)
    return yy + 2 * yh + hh


@cache
def derive_gradient(task: str = "identity"):
    """G(A) = -1/2 df/dA = E[h y_q x_q^T] - E[h h^T A x_q x_q^T] (d yhat / dA = h x_q^T)."""
    from ..gaussian import expectation

    v = variables(task)
    target = expectation(v.S, v.w.col, v.w.row, v.x_q.col, v.x_q.row)
    fitted = expectation(v.S, v.w.col, v.w.row, v.S, v.A, v.x_q.col, v.x_q.row)
    return target - fitted


@cache
def optimal_eigenvalue(task: str = "identity"):
    """g(lambda): the root of the spectral image of G under the ansatz A = g(Sigma)."""
    import sympy as sp

    from ..matrices import spectral

    a = sp.Symbol("a", real=True)
    v = variables(task)
    (root,) = sp.solve(spectral(derive_gradient(task), v.Sig, _lam(), {v.A: a}), a)
    return sp.factor(root)


@cache
def derive_optimal_preconditioner(task: str = "identity"):
    from ..matrices import from_spectral

    return from_spectral(optimal_eigenvalue(task), variables(task).Sig, _lam())


def stationarity_residual(task: str = "identity"):
    """Spectral image of G(A*): zero means A* is stationary for the full (non-ansatz) problem."""
    import sympy as sp

    from ..matrices import spectral

    v = variables(task)
    G = derive_gradient(task).xreplace({v.A: derive_optimal_preconditioner(task)})
    return sp.simplify(spectral(G, v.Sig, _lam()))


def hessian_factors(task: str = "identity"):
    """The loss is quadratic in A with Hessian (Sigma (x) C) up to a factor 2, C = E[S Cov(w) S]:
    returns the spectral images of Sigma and of C (both positive: f is strictly convex)."""
    import sympy as sp

    from ..gaussian import expectation
    from ..matrices import spectral

    v = variables(task)
    C = expectation(v.S, v.w.col, v.w.row, v.S)
    return _lam(), sp.factor(spectral(C, v.Sig, _lam()))


@cache
def optimal_loss_summand(task: str = "identity"):
    """Per-eigen-direction loss at the optimum: f* = sum_i s(lambda_i)."""
    import sympy as sp

    from ..matrices import trace_summand

    v = variables(task)
    s = trace_summand(derive_loss(task), v.Sig, _lam(), {v.A: optimal_eigenvalue(task)})
    return sp.factor(sp.cancel(s))


@cache
def derive_optimal_loss():
    import sympy as sp

    from ..matrices import from_spectral

    return sp.Trace(from_spectral(optimal_loss_summand(), variables().Sig, _lam()))


@cache
def derive_optimal_preconditioner_isotropic():
    """Eigenvalue function of the optimum at Sigma = I_d: lambda = 1, tr Sigma = d."""
    from ..matrices import trace_symbol
    from . import sym

    v = variables()
    return optimal_eigenvalue().xreplace({_lam(): 1, trace_symbol(1): v.D}).xreplace({v.D: sym("d")})


@cache
def derive_optimal_loss_inverse_task():
    """Under w* ~ N(0, Sigma^{-1}) the per-direction loss at the optimum does not depend on
    lambda, so f* = d * summand."""
    import sympy as sp

    from . import sym

    v = variables("inverse")
    s = optimal_loss_summand("inverse")
    if s.has(_lam()):
        raise ValueError("task: the inverse-task summand should not depend on lambda")
    return sp.factor(v.D * s).xreplace({v.D: sym("d")})


# -- printed forms -----------------------------------------------------------------------
def printed_optimal_preconditioner():
    """Eq. 6 in matrix form: U diag(1/((n+1)/n lambda_i + (1/n) sum_k lambda_k)) U^T
    = ((n+1)/n Sigma + tr(Sigma)/n I)^{-1}."""
    import sympy as sp

    v = variables()
    return sp.Inverse((v.n + 1) / v.n * v.Sig + sp.Trace(v.Sig) / v.n * sp.Identity(v.D))


def printed_optimal_preconditioner_isotropic():
    """Eq. 7: 1 / ((n-1)/n + (d+2)/n)."""
    from . import sym

    n, d = sym("n"), sym("d")
    return 1 / ((n - 1) / n + (d + 2) / n)


def worked_optimal_preconditioner_inverse_task():
    """Theorem 1 worked out for the inverse task w* ~ N(0, Sigma^{-1}) (not printed in the paper):
    n/(n+d+1) Sigma^{-1} (d = D)."""
    import sympy as sp

    v = variables()
    return v.n / (v.n + v.D + 1) * sp.Inverse(v.Sig)


def worked_optimal_loss_inverse_task():
    """Theorem 1 worked out for the inverse task (not printed in the paper): d(d+1)/(n+d+1)."""
    from . import sym

    n, d = sym("n"), sym("d")
    return d * (d + 1) / (n + d + 1)


# -- one theory, two papers (Zhang et al. 2025's merged minimum) ------------------------------
def to_merged_symbols(expr):
    """Rename Sigma -> Lambda, n -> N: the Zhang et al. names of the same objects."""
    from . import sym

    return expr.xreplace({sym("Sigma"): sym("Lambda"), sym("n"): sym("N")})


def one_theory_identities() -> dict:
    """Whether the Theorem-1 optimum and optimal loss equal the merged-model results of Zhang et
    al. 2025 (``linear_attention.merged.converged_matrix`` / ``.global_min_loss``) with
    Lambda = Sigma, N = n, and (negative control) whether the Theorem-3-model optimum
    n/(n+d+1) Sigma^{-1} also does (it must not)."""
    from .. import registry
    from ..compare import equal

    merged_M = registry.get("linear_attention.merged.converged_matrix").expr
    merged_L = registry.get("linear_attention.merged.global_min_loss").expr
    loss_M = registry.get("linear_attention.merged.loss").expr
    mine_loss = to_merged_symbols(derive_loss())
    from . import sym

    Lam = sym("Lambda")
    return {
        "optimal_preconditioner": equal(to_merged_symbols(derive_optimal_preconditioner()), merged_M, covariance=Lam),
        "optimal_loss": equal(to_merged_symbols(derive_optimal_loss()), merged_L, covariance=Lam),
        # the two loss functions agree with M = A: yhat = h^T A x_q = beta^T M x_q
        "loss": equal(mine_loss.xreplace({sym("A"): sym("M")}), loss_M, covariance=Lam),
        "control_inverse_task_optimum": equal(
            to_merged_symbols(derive_optimal_preconditioner("inverse")), merged_M, covariance=Lam),
    }


# -- registry ------------------------------------------------------------------------------
register(ClosedForm(
    id="preconditioned_gd.single_layer.loss",
    title="In-context loss f(A) of one layer with P_0 = E_{d+1,d+1}, Q_0 = -[[A, 0], [0, 0]]",
    source="eq. 15 and App. A.1 (closed form [derived])",
    status="exact",
    params=(SIGMA, N_CTX, A_PRE),
    derive=derive_loss,
    doc="f(A) = tr Sigma - 2 tr(Sigma A^T Sigma) + tr(Sigma A^T E[S^2] A) with "
        "E[S^2] = (n+1)/n Sigma^2 + tr(Sigma)/n Sigma, x ~ N(0, Sigma), w* ~ N(0, I). The "
        "prediction is yhat = h^T A x_q = x_q^T A^T h, so a non-symmetric A enters through A^T "
        "(the excess over the optimum is tr(Sigma D^T E[S^2] D), not tr(Sigma D E[S^2] D^T)). "
        "Equals linear_attention.merged.loss with Lambda = Sigma, N = n, M = A.",
))

register(ClosedForm(
    id="preconditioned_gd.single_layer.in_context_loss",
    title="The in-context loss of eq. 5 at L = 1, P_0 = E_{d+1,d+1}, Q_0 = -[[A, 0], [0, 0]]: E(TF_1 - y_q)^2",
    source="eq. 5 (sign corrected, as in eqs. 15, 22, 58)",
    status="exact",
    params=(SIGMA, N_CTX, A_PRE),
    derive=derive_loss,
    printed=printed_loss_eq5,
    doc="The loss the paper analyses: E([Z_1]_{d+1,n+1} + y_q)^2 = E(TF_1 - y_q)^2 (App. A.1 eq. 15, App. A.4 "
        "eq. 22, App. C.2 eq. 58, and the authors' code), the same function as preconditioned_gd.single_layer.loss; "
        "Theorem 1's Q_0 = -[[Gamma*, 0], [0, 0]] minimises it.",
    erratum="Eq. 5 prints f = E(TF_L + w*^T x^(n+1))^2 with TF_L = -[Z_L]_{d+1,n+1}, i.e. E([Z_L]_{d+1,n+1} - y_q)^2 "
            "read literally: at L = 1 it exceeds the analysed loss by 4 tr(Sigma A^T Sigma) and its minimiser is "
            "+Gamma*, the mirror of Theorem 1's Q_0 = -[[Gamma*, 0], [0, 0]]. The '+' should be '-' (equivalently "
            "([Z_L]_{d+1,n+1} + w*^T x)^2, as eq. 58 writes it). Eq. 5 also indexes the parameters l = 0..L where "
            "eq. 4 has l = 0..L-1.",
    example={"Sigma": [2.0, 1.0, 0.5], "n": 10, "A": [[0.4, 0.1, 0.0], [0.0, 0.7, 0.2], [0.1, 0.0, 1.0]]},
))

register(ClosedForm(
    id="preconditioned_gd.single_layer.optimal_preconditioner",
    title="Gamma*, the d x d block A of -Q_0 at the single-layer global minimum",
    source="Theorem 1, eq. 6",
    status="exact",
    params=(SIGMA, N_CTX),
    derive=derive_optimal_preconditioner,
    printed=printed_optimal_preconditioner,
    output="matrix",
    doc="Gamma* = n((n+1) Sigma + tr(Sigma) I)^{-1} = (Sigma + (Sigma + tr(Sigma) I)/n)^{-1}: one step "
        "of preconditioned GD from 0, yhat = <x_q, Gamma* h>. Unique among the A of the sparse "
        "form; over all (P, Q) unique up to P -> gamma P, Q -> Q/gamma and the blocks that do not "
        "reach the output. tr(Sigma)/n acts as a sample-size-dependent ridge. "
        "Identical to linear_attention.merged.converged_matrix with Lambda = Sigma, N = n.",
))

register(ClosedForm(
    id="preconditioned_gd.single_layer.optimal_preconditioner_isotropic",
    title="The scalar of Gamma* = gamma I for Sigma = I_d",
    source="eq. 7",
    status="exact",
    params=(D_DIM, N_CTX),
    derive=derive_optimal_preconditioner_isotropic,
    printed=printed_optimal_preconditioner_isotropic,
    doc="gamma = n/(n + d + 1); eq. 7 writes it as 1/((n-1)/n + (d+2)/n), which equals eq. 6 at "
        "lambda_i = 1 because (n+1)/n + d/n = (n-1)/n + (d+2)/n.",
))

register(ClosedForm(
    id="preconditioned_gd.single_layer.optimal_loss",
    title="f*, the single-layer in-context loss at the global minimum",
    source="Theorem 1 (value not stated in the paper [derived])",
    status="exact",
    params=(SIGMA, N_CTX),
    derive=derive_optimal_loss,
    doc="f* = tr Sigma - tr(Sigma^2 Gamma*) = sum_i lambda_i (lambda_i + T)/((n+1) lambda_i + T), "
        "T = tr Sigma; Sigma = I_d: d(d+1)/(n+d+1). Written per eigen-direction (no cancellation "
        "at large n). Identical to linear_attention.merged.global_min_loss with Lambda = Sigma, N = n.",
))

register(ClosedForm(
    id="preconditioned_gd.single_layer.optimal_preconditioner_inverse_task",
    title="Single-layer optimum when w* ~ N(0, Sigma^{-1}) (the model of Theorems 3-4)",
    source="§4.2 (the L = 1 case of Theorem 3 [derived])",
    status="exact",
    params=(SIGMA, N_CTX),
    derive=lambda: derive_optimal_preconditioner("inverse"),
    output="matrix",
    doc="E[S Sigma^{-1} S] = (n+d+1)/n Sigma, so the optimum n/(n+d+1) Sigma^{-1} has no "
        "tr(Sigma) ridge ('no trade-off', §4.2). Do not transfer Theorem 1's formula to this model.",
))

register(ClosedForm(
    id="preconditioned_gd.single_layer.optimal_loss_inverse_task",
    title="Single-layer optimal loss when w* ~ N(0, Sigma^{-1})",
    source="§4.2 (the L = 1 case of Theorem 3 [derived])",
    status="exact",
    params=(D_DIM, N_CTX),
    derive=derive_optimal_loss_inverse_task,
    doc="d - n d/(n+d+1) = d(d+1)/(n+d+1), independent of Sigma (baseline E[y_q^2] = d).",
))
