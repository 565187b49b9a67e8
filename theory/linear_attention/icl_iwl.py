"""In-context and in-weight learning with a fixed task vector (Zhang, Singh, Latham, Saxe 2025, App. G).

App. G trains ATTN_M on the task of §2.1 except that a portion ``p`` of the training sequences share one
fixed task vector ``w*``; the in-context test loss is taken on sequences with ``w ~ N(0, I)``, the
in-weight test loss on sequences with ``w = w*`` (Fig. 14). A layer with the vector blocks at zero
predicts ``beta^T M x_q`` (eq. M): it uses only the context, so its loss on the fixed task is fixed by
``M`` and ``w*``, and whatever it does better on ``w*`` is learnt in weight, through the blocks that
eq. 90 switches on.

What is derived here (not retyped): the loss of the eq.-M predictor on sequences with the one task
vector ``w*``,

    L(M; w*) = E[(y_q - beta^T M x_q)^2 | w = w*] = w*^T E[(I - Lambda_hat M) x_q x_q^T (I - M^T Lambda_hat)] w*,

with ``y_q - yhat = w*^T (I - Lambda_hat M) x_q`` (``beta = Lambda_hat w*``, eq. 29) and the expectation
of each of the four words by the Isserlis engine (:mod:`theory.gaussian`). Averaged over ``w* ~ N(0, I)``
it is ``linear_attention.merged.loss`` (a test checks it), and for a white ``Lambda`` and ``M``
proportional to ``I`` it is ``||w*||^2 / D`` times that loss.

The training loss on the mixture (a portion ``p`` of the tasks ``w*``, the rest ``N(0, I)``) of an
in-context predictor is quadratic in ``w``, so it is the loss under ``w ~ N(0, W)`` with the mixture's
second moment ``W = (1 - p) I + p w* w*^T``: the gradient ``G = -1/2 dL/dM`` of eq. 8 with that task
prior, again by the Isserlis engine, is affine in ``M``, ``G = G_0 - K M Lambda``, read off term by term,
and its zero

    M_p = K^-1 G_0 Lambda^-1,   K = (1 + 1/N) Lambda W Lambda + tr(W Lambda) Lambda / N,  G_0 = Lambda W Lambda,

is the minimum over in-context predictors (the loss is a convex quadratic in ``M``, with Hessian
``K (x) Lambda`` > 0). At ``p = 0`` it is eq. 9b's ``M*``. Trained from a small start, ATTN_M's first
drop takes it there when the task prior has fixed tasks (Fig. 14): it leans towards ``w*`` in context,
before anything is learnt in weight.

Contains
--------
``linear_attention.icl_iwl.task_loss``, ``.mixture_matrix``.
"""

from __future__ import annotations

from functools import cache

from ..params import nonnegative, vector
from ..registry import ClosedForm, register
from .data import query_is_token, variables
from .merged import LAMBDA, M_EFF, N_CTX

W_STAR = vector("w_star", "The fixed task vector w* of App. G (the in-weight test sequences' task).")
PORTION = nonnegative("p", "Portion of the training sequences whose task vector is w* (App. G), in [0, 1].",
                      sample=(0, 1))


def portion_domain(values: dict, dims: dict) -> None:
    """The portion ``p`` is a fraction of the training sequences."""
    import numpy as np

    if np.any(np.asarray(values["p"]) > 1):
        raise ValueError(f"p: the portion of fixed tasks must be in [0, 1], got {values['p']!r}")


def _sym(name):
    from . import sym

    return sym(name)


def error_words():
    """``(I - Lambda_hat M) x_q x_q^T (I - M^T Lambda_hat)`` as four signed words."""
    v = variables()
    M = _sym("M")
    left = [(1, []), (-1, [v.Lhat, M])]
    right = [(1, []), (-1, [M.T, v.Lhat])]
    return [(sl * sr, [*a, v.x_q.col, v.x_q.row, *b]) for sl, a in left for sr, b in right]


@cache
def derive_error_second_moment():
    """``A(M) = E[(I - Lambda_hat M) x_q x_q^T (I - M^T Lambda_hat)]`` (D x D), so that the loss on the
    task ``w`` is ``w^T A(M) w``."""
    import sympy as sp

    from ..gaussian import expectation

    return query_is_token(sp.MatAdd(*[sign * expectation(*word) for sign, word in error_words()]).doit())


@cache
def derive_task_loss():
    """``L(M; w*) = w*^T A(M) w*``."""
    w = _sym("w_star")
    import sympy as sp

    return sp.Trace(w.T * derive_error_second_moment() * w)


def mixture_second_moment():
    """``W = E[w w^T] = (1 - p) I + p w* w*^T`` of the App.-G task prior."""
    import sympy as sp

    w, p = _sym("w_star"), _sym("p")
    return (1 - p) * sp.Identity(variables().D) + p * w * w.T


@cache
def derive_mixture_gradient():
    """``G = -1/2 dL/dM = E[beta x_q^T y_q] - E[beta beta^T M x_q x_q^T]`` under ``w ~ N(0, W)`` with a
    symbolic ``W`` (eq. 8's right-hand side in D x D form; only the second moment of ``w`` enters)."""
    import sympy as sp

    from ..gaussian import Gaussian, expectation

    v = variables()
    W = sp.MatrixSymbol("W", v.D, v.D)
    w = Gaussian("w", W)
    target = expectation(v.Lhat, w.col, w.row, v.x_q.col, v.x_q.row)
    fitted = expectation(v.Lhat, w.col, w.row, v.Lhat, _sym("M"), v.x_q.col, v.x_q.row)
    return query_is_token(target - fitted), W


def affine_parts():
    """``(G_0, K)`` with ``G = G_0 - K M Lambda``, read off the derived gradient term by term (raises if a
    term has another shape)."""
    import sympy as sp

    from ..gaussian import _split_coeff

    G, W = derive_mixture_gradient()
    M, Lam = _sym("M"), variables().Lam
    const, lin = [], []
    for term in sp.Add.make_args(G) if not isinstance(G, sp.MatAdd) else G.args:
        c, mat = _split_coeff(term)
        if M not in mat.free_symbols:
            const.append(c * mat)
            continue
        args = mat.args if isinstance(mat, sp.MatMul) else (mat,)
        if len(args) < 2 or args[-1] != Lam or args[-2] != M or M in sp.MatMul(*args[:-2]).free_symbols:
            raise ValueError(f"gradient term {term} is not of the form X M Lambda")
        X = sp.MatMul(*args[:-2]).doit() if len(args) > 2 else sp.Identity(variables().D)
        lin.append(-c * X)
    return sp.MatAdd(*const).doit(), sp.MatAdd(*lin).doit(), W


@cache
def derive_mixture_matrix():
    """``M_p = K^-1 G_0 Lambda^-1``, the zero of the affine gradient, at the App.-G ``W``."""
    import sympy as sp

    G0, K, W = affine_parts()
    Lam = variables().Lam
    M = (sp.Inverse(K) * G0 * sp.Inverse(Lam)).doit()
    return M.xreplace({W: mixture_second_moment()})


register(ClosedForm(
    id="linear_attention.icl_iwl.task_loss",
    title="Loss of the in-context predictor beta^T M x_q on sequences with one fixed task vector w*",
    source="App. G, Fig. 14 (the in-weight test loss of a layer without in-weight learning [derived])",
    status="exact",
    params=(LAMBDA, N_CTX, M_EFF, W_STAR),
    derive=derive_task_loss,
    output="scalar",
    doc="w*^T A(M) w* with A(M) = E[(I - Lambda_hat M) x_q x_q^T (I - M^T Lambda_hat)]: the in-weight test "
        "loss of ATTN_M with its vector blocks at zero (eq. M), which learns nothing in weight. Its mean over "
        "w* ~ N(0, I) is linear_attention.merged.loss; at white Lambda and M = c I it is ||w*||^2 / D times it.",
))

register(ClosedForm(
    id="linear_attention.icl_iwl.mixture_matrix",
    title="Effective matrix of the best in-context predictor when a portion p of the tasks is one fixed w*",
    source="App. G, Fig. 14 (the level after the first drop [derived])",
    status="exact",
    params=(LAMBDA, N_CTX, W_STAR, PORTION),
    derive=derive_mixture_matrix,
    output="matrix",
    domain=portion_domain,
    doc="M_p = K^-1 Lambda W, K = (1 + 1/N) Lambda W Lambda + tr(W Lambda) Lambda / N, W = (1 - p) I + p w* w*^T: "
        "the minimiser over M of the App.-G training loss of beta^T M x_q (eq. 8's G = 0 under that task "
        "prior); eq. 9b's M* at p = 0.",
))
