"""Varying context length and the next-token loss (Zhang, Singh, Latham, Saxe 2025, App. A.1).

Next-token loss (eq. 23): the average over positions n = 2..N_max+1 of (y_n - yhat_n)^2,
where the prediction at position n sees n-1 context tokens and the 1/N of the model is
the current context length. Averaging over positions is averaging over a context length
uniform on 1..N_max.

Derivation: E[y_q z] = vec(Lambda^2) does not depend on N, and E[Lambda_hat^2] (hence the
loss L(M) of :mod:`theory.linear_attention.merged`) is *linear* in 1/N; so the position-averaged loss is L(M)
with 1/N replaced by nu = E(1/N) (eq. 30). Minimising it gives eq. 25 and, at the minimum,
eq. 26 with m = D. nu for the uniform length distribution is derived by ``summation``.

Contains
--------
``linear_attention.ntp.inv_length_mean``   E(1/N) = H_{N_max}/N_max
``linear_attention.ntp.converged_matrix``  eq. 25
``linear_attention.ntp.global_min_loss``   eq. 26 with m = D
``linear_attention.ntp.saddle_loss``       eq. 26: the loss at the m-th saddle of separate
                                         attention (:mod:`theory.linear_attention.separate`) with 1/N -> E(1/N)
"""

from __future__ import annotations

from functools import cache

from ..params import covariance, index
from ..registry import ClosedForm, register
from . import merged, separate
from .data import variables

LAMBDA = covariance("Lambda", "Token covariance (eq. 2).")
N_MAX = index("N_max", "Largest context length; lengths uniform on 1..N_max.")


def _sym(name):
    from . import sym

    return sym(name)


@cache
def derive_inv_length_mean():
    """E(1/N) = (1/N_max) sum_{n=1}^{N_max} 1/n."""
    import sympy as sp

    n = sp.Symbol("n", integer=True, positive=True)
    Nmax = _sym("N_max")
    return sp.summation(1 / n, (n, 1, Nmax)) / Nmax


def stable_inv_length_mean():
    """(digamma(N_max + 1) + Euler gamma)/N_max: the harmonic number for N_max up to 1e9."""
    import sympy as sp

    Nmax = _sym("N_max")
    return (sp.polygamma(0, Nmax + 1) + sp.EulerGamma) / Nmax


def loss_is_linear_in_inverse_length() -> bool:
    """The fixed-N loss L(M) is affine in u = 1/N (so averaging over lengths is u -> E(1/N))."""
    import sympy as sp

    u = sp.Symbol("u", positive=True)
    e = merged.derive_loss().xreplace({variables().N: 1 / u})
    return sp.expand(sp.diff(e, u, 2)) == 0


@cache
def derive_converged_matrix():
    """Eq. 11 with 1/N -> E(1/N): the minimiser of the linear-in-1/N loss."""
    return merged.derive_converged_matrix().xreplace({variables().N: 1 / derive_inv_length_mean()})


@cache
def derive_global_min_loss():
    """Minimum of the position-averaged loss: the per-direction minimum at 1/N -> E(1/N)."""
    import sympy as sp

    from ..matrices import from_spectral, trace_symbol

    if not loss_is_linear_in_inverse_length():
        raise ValueError("N: the loss is not affine in 1/N; the length average is not a substitution")
    s = merged.global_min_summand().xreplace({_sym("trLambda"): trace_symbol(1),
                                              variables().N: 1 / derive_inv_length_mean()})
    return sp.Trace(from_spectral(sp.factor(s), variables().Lam, _sym("lam")))


def printed_inv_length_mean():
    """App. A.1: "the harmonic number divided by N_max"."""
    import sympy as sp

    return sp.harmonic(_sym("N_max")) / _sym("N_max")


def printed_converged_matrix():
    """Eq. 25: [Lambda + E(1/N) (Lambda + tr(Lambda) I)]^{-1}."""
    import sympy as sp

    v = variables()
    nu = sp.harmonic(_sym("N_max")) / _sym("N_max")
    return sp.Inverse(v.Lam + nu * (v.Lam + sp.Trace(v.Lam) * sp.Identity(v.D)))


def printed_global_min_loss():
    """Eq. 26 with m = D: tr Lambda - sum_d lambda_d [1 + E(1/N)(1 + tr(Lambda)/lambda_d)]^{-1}."""
    import sympy as sp

    v = variables()
    nu = sp.harmonic(_sym("N_max")) / _sym("N_max")
    I = sp.Identity(v.D)
    return sp.Trace(v.Lam) - sp.Trace(v.Lam * sp.Inverse(I + nu * (I + sp.Trace(v.Lam) * sp.Inverse(v.Lam))))


def _stable(expr_fn):
    """The same expression with the harmonic number written as digamma(N_max + 1) + gamma."""

    def build():
        import sympy as sp

        return expr_fn().replace(sp.harmonic, lambda n: sp.polygamma(0, n + 1) + sp.EulerGamma)

    return build


@cache
def derive_saddle_loss():
    """Eq. 26: the loss at the saddle M_m = P_{1..m} M* of separate attention (eq. 19) with
    1/N -> E(1/N) (the loss is affine in 1/N)."""
    import sympy as sp

    F0, F1 = separate.loss_parts(inverse_length=True)
    return sp.Trace(F0) + sp.Trace(_sym("P") * F1)


def printed_saddle_loss():
    """Eq. 26: tr Lambda - sum_{d<=m} lambda_d [1 + E(1/N)(1 + tr Lambda/lambda_d)]^{-1}."""
    import sympy as sp

    v = variables()
    nu = sp.harmonic(_sym("N_max")) / _sym("N_max")
    I = sp.Identity(v.D)
    inner = sp.Inverse(I + nu * (I + sp.Trace(v.Lam) * sp.Inverse(v.Lam)))
    return sp.Trace(v.Lam) - sp.Trace(_sym("P") * v.Lam * inner)


register(ClosedForm(
    id="linear_attention.ntp.inv_length_mean",
    title="E(1/N) for context lengths uniform on 1..N_max",
    source="App. A.1 (the harmonic number divided by N_max)",
    status="exact",
    params=(N_MAX,),
    derive=derive_inv_length_mean,
    printed=printed_inv_length_mean,
    stable=stable_inv_length_mean,
))

register(ClosedForm(
    id="linear_attention.ntp.converged_matrix",
    title="Converged effective matrix under the next-token loss",
    source="eqs. 24-25",
    status="exact",
    params=(LAMBDA, N_MAX),
    derive=derive_converged_matrix,
    printed=printed_converged_matrix,
    stable=_stable(derive_converged_matrix),
    output="matrix",
))

register(ClosedForm(
    id="linear_attention.ntp.global_min_loss",
    title="Next-token loss at the global minimum (the last plateau)",
    source="eq. 26 with m = D",
    status="exact",
    params=(LAMBDA, N_MAX),
    derive=derive_global_min_loss,
    printed=printed_global_min_loss,
    stable=_stable(derive_global_min_loss),
    doc="The length distribution enters only through E(1/N). The first plateau is tr Lambda.",
))

register(ClosedForm(
    id="linear_attention.ntp.saddle_loss",
    title="Next-token loss at the m-th saddle (lengths uniform on 1..N_max)",
    source="eq. 26",
    status="exact",
    params=(LAMBDA, N_MAX, separate.M_SADDLE),
    derive=derive_saddle_loss,
    printed=printed_saddle_loss,
    stable=lambda: separate.stable_subset_loss(inverse_length=True),
    domain=separate.m_at_most_D,
    derived=separate.saddle_projector,
    derived_names=("P",),
))
