"""Moments of the in-context linear-regression task (Zhang, Singh, Latham, Saxe 2025).

Data model (§2.1, eq. 2): context tokens ``x_1..x_N`` and query ``x_q`` i.i.d.
``N(0, Lambda)``; task vector ``w ~ N(0, I)`` independent; labels ``y_n = w^T x_n``,
``y_q = w^T x_q``; no label noise. In-context statistics (App. C.1):
``Lambda_hat = (1/N) sum_n x_n x_n^T`` (27) and ``beta = (1/N) sum_n y_n x_n =
Lambda_hat w`` (29). Cubic feature of the merged model: ``z = vec(beta x_q^T) =
x_q (x) beta`` (eqs. 7, 42), column-major ``vec``.

Every moment below is *derived* by the Isserlis engine (:mod:`theory.gaussian`) from
these definitions, with a general query covariance ``Lambda_q`` (the paper keeps it
general in D.4) that is then set to ``Lambda``. The paper's printed forms are kept as
``printed`` and compared symbolically in the tests.

Contains
--------
``linear_attention.data.fourth_moment``            E[x x^T A x x^T]           (R3, [derived])
``linear_attention.data.lambda_hat_mean``          E[Lambda_hat]              (used in eq. 53)
``linear_attention.data.lambda_hat_sq``            E[Lambda_hat^2]            (eqs. 15, 30, 31)
``linear_attention.data.lambda_hat_sq_eq30_line2`` eq. 30 line 2 read literally (erratum)
``linear_attention.data.lambda_hat_sq_eigenvalue`` a_d                        (eqs. 32-33)
``linear_attention.data.beta_beta``                E[beta beta^T]
``linear_attention.data.yq_z``                     E[y_q z]                   (eq. 43)
``linear_attention.data.zz``                       E[z z^T]                   (eq. 44)
``linear_attention.data.yq_sq``                    E[y_q^2]
"""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace

from ..params import covariance, index, matrix, positive
from ..registry import ClosedForm, register

LAMBDA = covariance("Lambda", "Token covariance (eq. 2).")
N_CTX = index("N", "Context length: number of labelled tokens before the query.", example=5)


@cache
def variables() -> SimpleNamespace:
    """The random variables of the task, as engine objects (created once)."""
    import sympy as sp

    from ..gaussian import Gaussian, SampleCovariance
    from ..symbols import dim
    from . import sym

    D = dim()
    Lam, Lam_q, N = sym("Lambda"), sym("Lambda_q"), sym("N")
    x = Gaussian("x", Lam)
    x_q = Gaussian("x_q", Lam_q)
    w = Gaussian("w", sp.Identity(D))
    Lhat = SampleCovariance(x, N)
    return SimpleNamespace(D=D, N=N, Lam=Lam, Lam_q=Lam_q, x=x, x_q=x_q, w=w, Lhat=Lhat)


def query_is_token(expr):
    """Set the query covariance Lambda_q to Lambda (the paper's case)."""
    v = variables()
    return expr.xreplace({v.Lam_q: v.Lam})


# -- words: the random quantities as engine words ------------------------------------
def beta_word():
    """beta = Lambda_hat w (eq. 29)."""
    v = variables()
    return [v.Lhat, v.w.col]


def beta_row_word():
    v = variables()
    return [v.w.row, v.Lhat]


def yq_word():
    """y_q = w^T x_q (a scalar word)."""
    v = variables()
    return [v.w.row, v.x_q.col]


# -- derivations ---------------------------------------------------------------------
@cache
def derive_fourth_moment():
    from ..gaussian import expectation
    from . import sym

    v = variables()
    A = sym("A")
    return expectation(v.x.col, v.x.row, A, v.x.col, v.x.row)


@cache
def derive_lambda_hat_mean():
    from ..gaussian import expectation

    return expectation(variables().Lhat)


@cache
def derive_lambda_hat_sq():
    """E[Lambda_hat^2] for symbolic N (eq. 31)."""
    from ..gaussian import expectation

    v = variables()
    return expectation(v.Lhat, v.Lhat)


@cache
def derive_beta_beta():
    from ..gaussian import expectation

    return expectation(*beta_word(), *beta_row_word())


@cache
def derive_yq_z():
    """E[y_q z] = vec(E[beta x_q^T y_q]) = vec(E[Lambda_hat w w^T x_q x_q^T]) (eq. 43).

    ``z = vec(beta x_q^T)`` and ``y_q`` is a scalar, so ``y_q z = vec(beta x_q^T y_q)`` with
    ``x_q^T y_q = (w^T x_q) x_q^T = w^T x_q x_q^T``.
    """
    from ..gaussian import expectation
    from ..matrices import Vec

    v = variables()
    return Vec(expectation(*beta_word(), v.w.row, v.x_q.col, v.x_q.row))


@cache
def derive_zz():
    """E[z z^T] = E[(x_q x_q^T) (x) (beta beta^T)] (mixed product, eq. 39d), x_q independent."""
    from ..gaussian import expectation_kron

    v = variables()
    return expectation_kron([v.x_q.col, v.x_q.row], [*beta_word(), *beta_row_word()])


@cache
def derive_yq_sq():
    from ..gaussian import expectation

    return expectation(*yq_word(), *reversed_scalar(yq_word()))


def reversed_scalar(word):
    """The transpose of a scalar word (w^T x_q -> x_q^T w)."""
    import sympy as sp

    out = []
    for f in reversed(word):
        if hasattr(f, "vec") and hasattr(f, "transposed"):
            out.append(f.vec.row if not f.transposed else f.vec.col)
        else:
            out.append(sp.Transpose(f) if getattr(f, "is_Matrix", False) else f)
    return out


def spectral_image(expr):
    """Eigenvalue function of a function of Lambda (see :func:`theory.matrices.spectral`)."""

    from ..matrices import spectral, trace_symbol
    from . import sym

    img = spectral(expr, variables().Lam, sym("lam"))
    return img.xreplace({trace_symbol(1): sym("trLambda")})


# -- printed forms -------------------------------------------------------------------
def printed_fourth_moment():
    """The form of App. C.1 (three Isserlis pairings): Lambda A Lambda + Lambda A^T Lambda + tr(A Lambda) Lambda."""
    import sympy as sp

    from . import sym

    v, A = variables(), sym("A")
    return v.Lam * A * v.Lam + v.Lam * A.T * v.Lam + sp.Trace(A * v.Lam) * v.Lam


def printed_lambda_hat_sq():
    """Eq. 31 (= main-text eq. 15)."""
    import sympy as sp

    v = variables()
    return v.Lam**2 + ((v.Lam + sp.Trace(v.Lam) * sp.Identity(v.D)) / v.N) * v.Lam


def printed_eq30_line2():
    """Eq. 30, second line, read literally: weights (N^2-N)/N^2 on the sum over the
    N(N-1) ordered pairs n != n', and N/N^2 on the sum over the N diagonal terms."""
    import sympy as sp

    v = variables()
    N, Lam = v.N, v.Lam
    pairs = N * (N - 1) * Lam**2  # sum_{n != n'} E[x_n x_n^T x_n' x_n'^T]
    diag = N * (2 * Lam**2 + sp.Trace(Lam) * Lam)  # sum_n E[x_n x_n^T x_n x_n^T]
    return (N**2 - N) / N**2 * pairs + N / N**2 * diag


def printed_eigenvalue():
    """Eq. 32: a_d = (1 + 1/N) lambda_d^2 + tr(Lambda) lambda_d / N."""
    from . import sym

    lam, T, N = sym("lam"), sym("trLambda"), sym("N")
    return (1 + 1 / N) * lam**2 + T * lam / N


def printed_trace():
    """tr(Lambda)."""
    import sympy as sp

    return sp.Trace(variables().Lam)


def printed_yq_z():
    """Eq. 43 with Lambda_q = Lambda: vec(Lambda^2)."""
    from ..matrices import Vec

    v = variables()
    return Vec(v.Lam * v.Lam)


def printed_zz():
    """Eq. 44 with Lambda_q = Lambda: Lambda (x) E[Lambda_hat^2]."""
    import sympy as sp

    return sp.KroneckerProduct(variables().Lam, printed_lambda_hat_sq())


# -- registry ------------------------------------------------------------------------
register(ClosedForm(
    id="linear_attention.data.fourth_moment",
    title="E[x x^T A x x^T] for x ~ N(0, Lambda) and a fixed matrix A",
    source="App. C.1 (Isserlis; general A [derived])",
    status="exact",
    params=(LAMBDA, matrix("A", "Any fixed D x D matrix.")),
    derive=derive_fourth_moment,
    printed=printed_fourth_moment,
    output="matrix",
    doc="Three Isserlis pairings: Lambda A Lambda, Lambda A^T Lambda and tr(A Lambda) Lambda. "
        "A = I gives the fourth moment 2 Lambda^2 + tr(Lambda) Lambda used in eq. 30.",
))

register(ClosedForm(
    id="linear_attention.data.lambda_hat_mean",
    title="E[Lambda_hat], the mean in-context covariance",
    source="eq. 27 and eq. 53",
    status="exact",
    params=(LAMBDA, N_CTX),
    derive=derive_lambda_hat_mean,
    printed=lambda: variables().Lam,
    output="matrix",
))

register(ClosedForm(
    id="linear_attention.data.lambda_hat_sq",
    title="E[Lambda_hat^2], second moment of the in-context covariance",
    source="eqs. 15, 30, 31",
    status="exact",
    params=(LAMBDA, N_CTX),
    derive=derive_lambda_hat_sq,
    printed=printed_lambda_hat_sq,
    output="matrix",
    doc="Sum over the N^2 index pairs: N(N-1) distinct pairs give Lambda^2, the N equal "
        "ones the Gaussian fourth moment. Needs Gaussian tokens; for a context-length "
        "distribution replace 1/N by E(1/N) (eq. 30).",
))

register(ClosedForm(
    id="linear_attention.data.lambda_hat_sq_eq30_line2",
    title="Eq. 30 line 2 as printed (weights (N^2-N)/N^2 and N/N^2 on the sums)",
    source="eq. 30, second line",
    status="exact",
    params=(LAMBDA, N_CTX),
    derive=derive_lambda_hat_sq,
    printed=printed_eq30_line2,
    output="matrix",
    erratum="Both sums need the weight 1/N^2 (or be written as averages). Read literally, "
            "the printed weights give (N-1)^2 Lambda^2 + 2 Lambda^2 + tr(Lambda) Lambda, "
            "which grows like N^2; lines 3-4 and eq. 31 are right.",
))

register(ClosedForm(
    id="linear_attention.data.lambda_hat_sq_eigenvalue",
    title="a_d, eigenvalue of E[Lambda_hat^2] along the eigenvector e_d of Lambda",
    source="eqs. 32-33",
    status="exact",
    params=(positive("lam", "Eigenvalue lambda_d of Lambda."),
            positive("trLambda", "Trace of Lambda.", sample=(1, 10)), N_CTX),
    derive=lambda: spectral_image(derive_lambda_hat_sq()),
    printed=printed_eigenvalue,
    doc="E[Lambda_hat^2] is a polynomial in Lambda and tr(Lambda), so it shares the "
        "eigenvectors of Lambda; its eigenvalues are the spectral image of the matrix.",
))

register(ClosedForm(
    id="linear_attention.data.beta_beta",
    title="E[beta beta^T]",
    source="App. D.4 (E[beta beta^T] = E[Lambda_hat w w^T Lambda_hat])",
    status="exact",
    params=(LAMBDA, N_CTX),
    derive=derive_beta_beta,
    printed=printed_lambda_hat_sq,
    output="matrix",
    doc="beta = Lambda_hat w with E[w w^T] = I, so E[beta beta^T] = E[Lambda_hat^2].",
))

register(ClosedForm(
    id="linear_attention.data.yq_z",
    title="E[y_q z], correlation of the target with the cubic feature",
    source="eq. 43",
    status="exact",
    params=(LAMBDA,),
    derive=lambda: query_is_token(derive_yq_z()),
    printed=printed_yq_z,
    output="vector",
    doc="Length D^2, column-major vec: vec(Lambda Lambda_q) with Lambda_q = Lambda. "
        "Independent of N.",
))

register(ClosedForm(
    id="linear_attention.data.zz",
    title="E[z z^T] = Lambda (x) E[Lambda_hat^2], covariance of the cubic feature",
    source="eq. 44",
    status="exact",
    params=(LAMBDA, N_CTX),
    derive=lambda: query_is_token(derive_zz()),
    printed=printed_zz,
    output="matrix",
    doc="D^2 x D^2. The Kronecker order holds for z = vec(beta x_q^T) = x_q (x) beta "
        "(column-major vec); row-major flattening gives the swapped order.",
))

register(ClosedForm(
    id="linear_attention.data.yq_sq",
    title="E[y_q^2], the loss of the zero predictor",
    source="App. E.4 (E[x_q^T x_q] = tr Lambda)",
    status="exact",
    params=(LAMBDA,),
    derive=lambda: query_is_token(derive_yq_sq()),
    printed=printed_trace,
))
