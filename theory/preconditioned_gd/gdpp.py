"""GD++: the general (full) layers of eq. 11 on the set of Theorem 4 (Ahn, Cheng, Daneshmand,
Sra 2023, §5, Theorem 4, App. B.3).

On ``A_l = a_l Sigma^{-1}``, ``B_l = b_l I`` (eq. 11 convention: ``Q_l = +[[A_l, 0], [0, 0]]``,
``P_l = [[B_l, 0], [0, 1]]``) the loss is ``E sum_k r(s_k)^2`` over the eigenvalues of the white
Wishart covariance ``S_u``, with the residual polynomial of :func:`gdpp_residual`; for two layers
``r^2`` has degree 8 in ``s``, so the loss is a combination of the moments ``m_0..m_8``
(:mod:`theory.preconditioned_gd.wishart`) and does not depend on Sigma.

Contains
--------
``preconditioned_gd.gdpp.loss``.
"""

from __future__ import annotations

from ..params import steps
from ..registry import ClosedForm, register
from . import sym
from .wishart import D_DIM, N_CTX, normalized_moment


def gdpp_residual(a, b, s):
    """``r(s)`` of GD++ (eq. 11: ``Q_l = +[[A_l, 0], [0, 0]]``, ``P_l = [[B_l, 0], [0, 1]]``) on
    ``A_l = a_l Sigma^{-1}``, ``B_l = b_l I``: ``p_0 = 1``, ``p_{l+1} = p_l (1 + a_l b_l s p_l^2)``,
    ``r(s) = prod_l (1 + a_l s p_l(s)^2)`` (``s`` an eigenvalue of ``S_u``).

    Whitening ``X_l = W U_l`` turns layer l into ``U_{l+1} = (I + a_l b_l S_l) U_l`` with
    ``S_l = (1/n) U_l M U_l^T = S_u p_l(S_u)^2``, and the label row into
    ``(I + a_l S_l)`` acting on the residual; all factors are functions of ``S_u``.
    """
    r, p = 1, 1
    for l, al in enumerate(a):
        r = r * (1 + al * s * p**2)
        if l < len(a) - 1:
            p = p * (1 + al * b[l] * s * p**2)
    return r


def derive_gdpp_loss():
    """``E sum_k r(s_k)^2`` for two GD++ layers: ``r^2`` has degree 8 in ``s``, so the loss is
    ``sum_j e_j m_j`` over the Wishart moments ``m_0..m_8``. ``B_1`` never reaches the output."""
    import sympy as sp

    n, d = sym("n"), sym("d")
    a, b = [sym("a_0"), sym("a_1")], [sym("b_0")]
    s = sp.Dummy("s")
    poly = sp.Poly(sp.expand(gdpp_residual(a, b, s) ** 2), s)
    return sp.Add(*[poly.coeff_monomial(s**k) * normalized_moment(k, n, d) for k in range(poly.degree() + 1)])


def _gdpp_values(values, dims, backend="numpy"):
    a, b = values["a"], values["b"]
    if len(b) != len(a):
        raise ValueError(f"b: expected one scale per layer ({len(a)}), got {len(b)}")
    a = tuple(a) + (0.0,) * (2 - len(a))
    return {"a_0": a[0], "a_1": a[1], "b_0": b[0]}


register(ClosedForm(
    id="preconditioned_gd.gdpp.loss",
    title="Loss of L <= 2 GD++ layers on the set A_l = a_l Sigma^{-1}, B_l = b_l I",
    source="Theorem 4, eq. 11 and App. B.3 [loss derived]",
    status="exact",
    params=(N_CTX, D_DIM,
            steps("a", "Steps a_0, ..., a_{L-1} of A_l = a_l Sigma^{-1} in the eq.-11 convention (Q_l = "
                       "+[[A_l, 0], [0, 0]]: descent needs a_l < 0).", high=2),
            steps("b", "Scales b_l of B_l = b_l I, one per layer (b_{L-1} does not affect the output).",
                  high=2)),
    derive=derive_gdpp_loss,
    domain=_gdpp_values,
    derived=_gdpp_values,
    derived_names=("a_0", "a_1", "b_0"),
    doc="x ~ N(0, Sigma), w* ~ N(0, Sigma^{-1}). f = E sum_k r(s_k)^2 over the eigenvalues of S_u with "
        "r(s) = (1 + a_0 s)(1 + a_1 s (1 + a_0 b_0 s)^2): a degree-8 polynomial in s, so f uses m_0..m_8 "
        "and does not depend on Sigma. a_1 = 0 (zero padding) gives the one-layer loss. The GD++ step "
        "X_{l+1} = (I + a_l b_l S) X_l with a_l b_l < 0 is the curvature correction of §5.",
))
