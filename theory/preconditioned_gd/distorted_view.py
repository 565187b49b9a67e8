"""The least-squares risk of one prompt and its Hessian (Ahn, Cheng, Daneshmand, Sra 2023, §4.2).

§4.2 ("linear regression with distorted view of the data") motivates Theorem 3 by Newton's
method: by Lemma 1 the transformer runs preconditioned gradient descent on the in-context
least-squares risk

    R_{w*}(w) = (1/2n) (w - w*)^T X X^T (w - w*) = (1/2) (w - w*)^T S (w - w*),

``X = [x^(1), ..., x^(n)]`` the context covariates and ``S = X X^T / n`` their empirical covariance
(symmetric). Its Hessian is derived here by sympy's matrix calculus: ``grad R = (S + S^T)(w - w*)/2``
and ``grad^2 R = (S + S^T)/2 = S``. The paper prints ``(1/2n) X X^T = S/2`` "(at least in the case
of large n)": the factor 1/2 is a slip at every n (the 1/2 of R cancels against the 2 of the
derivative of a quadratic). With the printed Hessian a Newton step ``w - H^{-1} grad R`` lands at
``2 w* - w`` instead of ``w*``. The conclusion of the paragraph (Newton's method corresponds to
``A_i`` proportional to ``(X X^T)^{-1}``) holds: proportionality absorbs the factor (as it absorbs
the ``n`` in the paragraph's ``Sigma^{-1} = E[X X^T]^{-1}``, where ``E[X X^T] = n Sigma``).

Contains
--------
``preconditioned_gd.distorted_view.risk_hessian``.

References
----------
.. [1] K. Ahn, X. Cheng, H. Daneshmand, S. Sra, "Transformers learn to implement preconditioned
   gradient descent for in-context learning", NeurIPS 2023, §4.2 and Lemma 1 (eq. 9).
"""

from __future__ import annotations

from functools import cache

from ..params import covariance
from ..registry import ClosedForm, register

S_CTX = covariance("S", "Empirical covariance S = X X^T / n of the n context covariates (positive definite "
                        "for n >= d).")


@cache
def derive_risk_hessian():
    """Second derivative of ``R(w) = (1/2)(w - w*)^T S (w - w*)`` in ``w`` (sympy matrix calculus),
    with ``S^T = S``."""
    import sympy as sp

    from ..symbols import dim
    from . import sym

    D, S = dim(), sym("S")
    w, w_star = sp.MatrixSymbol("w", D, 1), sp.MatrixSymbol("w_star", D, 1)
    R = (w - w_star).T * S * (w - w_star) / 2
    H = R.diff(w).diff(w)
    return sp.MatAdd(H.xreplace({S.T: S})).doit()


def printed_risk_hessian():
    """§4.2: ``grad^2 R_{w*}(w) = (1/2n) X X^T = S/2``."""
    from . import sym

    return sym("S") / 2


register(ClosedForm(
    id="preconditioned_gd.distorted_view.risk_hessian",
    title="Hessian of the in-context least-squares risk R_{w*}(w) = (1/2n)(w - w*)^T X X^T (w - w*)",
    source="§4.2 (distorted view; the risk of Lemma 1, eq. 9)",
    status="exact",
    params=(S_CTX,),
    derive=derive_risk_hessian,
    printed=printed_risk_hessian,
    output="matrix",
    doc="grad^2 R = (1/n) X X^T = S for every n and w (R is quadratic); a Newton step "
        "w - S^{-1} grad R lands on w* (n >= d). The transformer's A_l play the role of S^{-1} "
        "(Lemma 1), whence A_l proportional to Sigma^{-1} = E[S]^{-1} (Theorem 3).",
    erratum="§4.2 prints grad^2 R_{w*}(w) = (1/2n) X X^T '(at least in the case of large n)'; the Hessian of "
            "(1/2n)(w - w*)^T X X^T (w - w*) is (1/n) X X^T = S exactly, at every n. With the printed Hessian "
            "a Newton step lands at 2 w* - w instead of w*. The paragraph's conclusion (Newton's method <-> A_i "
            "proportional to (X X^T)^{-1}) is unaffected, as is its Sigma^{-1} = E[X X^T]^{-1}, which is off by "
            "the factor n (E[X X^T] = n Sigma) but only claims proportionality.",
    example={"S": [2.0, 1.0, 0.5]},
))
