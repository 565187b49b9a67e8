"""The blocks every reduced form sets to zero (Zhang, Singh, Latham, Saxe 2025, App. D.1, F.1).

The full merged layer ATTN_M has per head a value row ``(a_i^T, v_i) = W^V_i[D, :]`` and a key-query
matrix whose query-facing columns are ``[U_i; u_i^T] = W^KQ_i[:, :D]`` (the paper calls both vector
blocks ``v_i`` and ``u_i``; here the value vector is ``a_i`` to keep it apart from the scalar ``v_i``).
With the query column ``(x_q, 0)`` and ``rho = N`` the prediction is

    yhat = (1/N) sum_i (a_i^T, v_i) X X^T [U_i x_q ; u_i^T x_q],

and eq. (M), ``yhat = beta^T M x_q`` with ``M = sum_i v_i U_i``, is this at ``a_i = u_i = 0``. App. D.1
(eqs. 40-41) says that those blocks stay zero: their population gradients vanish at ``a_i = u_i = 0``.

What is derived here (not retyped): the right-hand sides of the gradient flow (eq. 5,
``tau dW/dt = -1/2 dL/dW``) of the two blocks at ``a_i = u_i = 0``, for a task vector
``w ~ N(mu, I)``. With ``y_q - yhat = x_q^T (I - M^T Lambda_hat) w`` and ``X X^T`` split into
``N Lambda_hat + x_q x_q^T`` (the query column counts in the Gram matrix; its label slot is 0),
``N Lambda_hat w`` and ``N w^T Lambda_hat w``:

* ``value_vector_gradient``  ``-1/2 dL/da_i = E[(N Lambda_hat + x_q x_q^T)/N U_i x_q x_q^T (I - M^T Lambda_hat) w]``;
* ``kq_vector_gradient``     ``-1/2 dL/du_i = v_i E[x_q x_q^T (I - M^T Lambda_hat) w w^T Lambda_hat w]``.

Each ``w`` is split into ``mu + g`` with ``g ~ N(0, I)`` and every word goes through the Isserlis
engine (:mod:`theory.gaussian`), which drops the words with an odd number of ``g``. At ``mu = 0`` every
word has an odd number of ``g`` (one, or three), so both gradients are 0: eqs. 40-41, derived; the sign
flip ``w -> -w`` of the task prior is what makes them vanish. A prior with a mean breaks it.

The separate layer ATTN_S (App. F.1) is the same expression with ``U_i = sum_r k_ir q_ir^T`` and
``u_i = sum_r kappa_ir q_ir`` (``kappa_ir = W^K_i[r, D]``, the scalar blocks ``k_ir`` of the paper), so
its value vectors have ``value_vector_gradient`` at that ``U_i`` and its scalars
``-1/2 dL/dkappa_ir = q_ir^T kq_vector_gradient``.

Contains
--------
``linear_attention.zero_blocks.value_vector_gradient``, ``.kq_vector_gradient``.
"""

from __future__ import annotations

from functools import cache

from ..params import matrix, real, vector
from ..registry import ClosedForm, register
from .data import query_is_token, variables
from .merged import LAMBDA, M_EFF, N_CTX
U_HEAD = matrix("U", "This head's key-query block U_i (ATTN_S: sum_r k_ir q_ir^T).")
V_HEAD = real("v_i", "This head's value scalar v_i.")
MU = vector("mu", "Mean of the task vector, w ~ N(mu, I) (the paper: mu = 0).")


def _sym(name):
    from . import sym

    return sym(name)


def _query_words():
    """P = x_q x_q^T (I - M^T Lambda_hat) as two words: (sign, factors)."""
    v = variables()
    q = [v.x_q.col, v.x_q.row]
    return [(1, q), (-1, [*q, _sym("M").T, v.Lhat])]


def _total(terms):
    import sympy as sp

    return query_is_token(sp.MatAdd(*terms).doit())


@cache
def derive_value_vector_gradient():
    """-1/2 dL/da_i at a = u = 0: E[(Lambda_hat + x_q x_q^T / N) U x_q x_q^T (I - M^T Lambda_hat) w] with
    w = mu + g; the word ends on w: its g part is odd in g (0: eq. 40), its mu part is E[...] mu."""
    from ..gaussian import expectation

    v = variables()
    U, mu = _sym("U"), _sym("mu")
    terms = []
    for lead, weight in (([v.Lhat], 1), ([v.x_q.col, v.x_q.row], 1 / v.N)):
        for sign, P in _query_words():
            word = [*lead, U, *P]
            terms.append(sign * weight * expectation(*word) * mu)       # w -> mu; w -> g is odd in g
    return _total(terms)


@cache
def derive_kq_vector_gradient():
    """-1/2 dL/du_i at a = u = 0: v_i E[P w (w^T Lambda_hat w)] with P = x_q x_q^T (I - M^T Lambda_hat)
    and w = mu + g. Of the eight choices of mu or g for the three w, the four with an odd number of g
    vanish; the others are (mu, mu, mu): P mu mu^T Lambda_hat mu; (mu, g, g): P mu (g^T Lambda_hat g);
    (g, mu, g) and (g, g, mu): twice P g g^T Lambda_hat mu (Lambda_hat is symmetric)."""
    from ..gaussian import Closed, expectation

    v = variables()
    mu, vi = _sym("mu"), _sym("v_i")
    g = v.w
    terms = []
    for sign, P in _query_words():
        terms.append(sign * expectation(*P, mu * mu.T, v.Lhat) * mu)
        terms.append(sign * expectation(*P, Closed(g.row, v.Lhat, g.col)) * mu)
        terms.append(2 * sign * expectation(*P, g.col, g.row, v.Lhat) * mu)
    return vi * _total(terms)


def at_paper_prior(expr):
    """``expr`` at mu = 0, the paper's task prior."""
    import sympy as sp

    return sp.simplify(expr.xreplace({_sym("mu"): sp.ZeroMatrix(variables().D, 1)}).doit())


register(ClosedForm(
    id="linear_attention.zero_blocks.value_vector_gradient",
    title="-1/2 dL/da_i, the flow of the value vector block at a_i = u_i = 0 (0 for the paper's prior)",
    source="App. D.1, eq. 40; App. F.1 for ATTN_S (at w ~ N(mu, I) [derived])",
    status="exact",
    params=(LAMBDA, N_CTX, M_EFF, U_HEAD, MU),
    derive=derive_value_vector_gradient,
    output="vector",
    doc="The right-hand side tau da_i/dt of the value vector a_i = W^V_i[D, :D] of one head (the paper's "
        "vector v_i) while every a_j, u_j is 0: linear in mu, so 0 for the paper's w ~ N(0, I) (eq. 40) and "
        "not for a prior with a mean. ATTN_S: U = sum_r k_ir q_ir^T.",
))

register(ClosedForm(
    id="linear_attention.zero_blocks.kq_vector_gradient",
    title="-1/2 dL/du_i, the flow of the key-query vector block at a_i = u_i = 0 (0 for the paper's prior)",
    source="App. D.1, eq. 41; App. F.1 for ATTN_S (at w ~ N(mu, I) [derived])",
    status="exact",
    params=(LAMBDA, N_CTX, M_EFF, V_HEAD, MU),
    derive=derive_kq_vector_gradient,
    output="vector",
    doc="The right-hand side tau du_i/dt of the vector u_i = W^KQ_i[D, :D] of one head while every a_j, "
        "u_j is 0: odd in mu (terms of degree 1 and 3), so 0 for the paper's w ~ N(0, I) (eq. 41). ATTN_S: "
        "the scalar blocks kappa_ir = W^K_i[r, D] move at q_ir^T times this, with v_i their head's value.",
))
