"""Single-layer ReLU attention: Theorem 5 of Ahn, Cheng, Daneshmand, Sra 2023 (§6, App. A.4).

Model. ``x^(1..n+1), w* ~ N(0, I_d)`` independent, noiseless labels. The ReLU layer is
``Z_1 = Z_0 + (1/n) P Z_0 M sigma(Z_0^T Q Z_0)`` with ``sigma = max(0, .)`` entrywise and the
mask ``M = diag(1, .., 1, 0)``; the loss is ``f = E([Z_1]_{d+1,n+1} + y_q)^2`` (eq. 22; the
prediction is ``-[Z_1]_{d+1,n+1}``). With ``P = E_{d+1,d+1}`` and ``Q = [[A, 0], [0, 0]]`` (``A``
is the top-left block of Q itself; Theorem 5's minimiser has ``A = -2n/(n+2d+3) I``)::

    [Z_1]_{d+1,n+1} = (1/n) sum_i y^(i) sigma(x^(i)T A x_q).

Derivation of ``f(A)`` (every Gaussian moment by the Isserlis engine, :mod:`theory.gaussian`;
the two ReLU facts by sympy):

1. ``f = E[y_q^2] + 2 E[y_q r] + E[r^2]``, ``r = (1/n) sum_i y^(i) sigma_i``,
   ``sigma_i = sigma(x^(i)T v)``, ``v = A x_q``.
2. Stein's lemma for ``x ~ N(0, I)`` and fixed ``v``: ``E[x sigma(x^T v)] = E[sigma'(x^T v)] v
   = p v`` with ``p = P(Z > 0) = 1/2`` (sympy.stats; ``v = 0`` gives ``0 = p v`` too). Given
   ``(w*, x_q)`` the context terms are independent, so ``E[y^(i) sigma_i | w*, x_q] = p w*^T A x_q``.
   Hence ``E[y_q r] = p E[x_q^T w w^T A x_q]`` and, for ``i != j``,
   ``E[y^(i) sigma_i y^(j) sigma_j] = p^2 E[(w^T A x_q)^2]`` (engine).
3. Symmetry halving for ``i = j``: ``sigma(t)^2 + sigma(-t)^2 = t^2`` (sympy, both signs of t) and
   ``(w^T x)^2`` is even in ``x``, so ``E[(w^T x)^2 sigma(x^T v)^2] = q E[(w^T x)^2 (x^T v)^2]``
   with ``q = 1/2`` (engine for the quartic moment: ``(d + 2) tr(A^T A)``).
4. ``E[r^2] = ((n-1)/n) p^2 tr(A^T A) + (1/n) q (d+2) tr(A^T A)``; collecting,
   ``f(A) = c ||A||_F^2 + tr A + d`` with ``c = (n + 2d + 3)/(4n)``.

``f`` is a strictly convex quadratic in ``A`` with gradient ``2 c A + I``, so
``A* = -I/(2c) = -2n/(n+2d+3) I`` is its unique minimiser and ``f* = d(2d+3)/(n+2d+3)``.

The paper's proof (A.4) lower-bounds ``f`` by Jensen over random signs and then drops
``E(w^T D x)^2 = tr(D^2)`` as a "constant" in eq. 23, but ``D = diag(U^T V)`` depends on the SVD
of A; the direct computation above closes the gap.

Contains
--------
``preconditioned_gd.relu.loss``, ``.optimal_scale``, ``.optimal_loss``.

References
----------
.. [1] K. Ahn, X. Cheng, H. Daneshmand, S. Sra, NeurIPS 2023, Theorem 5 and App. A.4 (eqs. 22-24).
.. [2] M. A. Erdogdu, L. H. Dicker, M. Bayati, "Scaled least squares estimator for GLMs in
   large-scale problems", NeurIPS 2016 (the Stein's-lemma argument).
"""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace

from ..params import index, matrix
from ..registry import ClosedForm, register

N_CTX = index("n", "Context length (labelled examples; the query excluded).", low=1)
D_DIM = index("d", "Covariate dimension (x, w* ~ N(0, I_d)).", low=1, sample=(1, 9))
A_BLOCK = matrix("A", "Top-left d x d block of Q = [[A, 0], [0, 0]] (P = E_{d+1,d+1}).")


@cache
def variables() -> SimpleNamespace:
    import sympy as sp

    from ..gaussian import Gaussian
    from ..symbols import dim
    from . import sym

    D = dim()
    I = sp.Identity(D)
    return SimpleNamespace(D=D, n=sym("n"), A=sym("A"), x=Gaussian("x", I), x_q=Gaussian("x_q", I),
                           w=Gaussian("w", I))


@cache
def stein_factor():
    """p = E[sigma'(Z)] = P(Z > 0) for Z ~ N(0, 1): Stein's lemma gives E[x sigma(x^T v)] = p v."""
    import sympy as sp
    from sympy.stats import E, Normal

    Z = Normal("Z", 0, 1)
    return sp.nsimplify(E(sp.Heaviside(Z)))


@cache
def halving_factor():
    """q with E[g(x) sigma(x^T v)^2] = q E[g(x) (x^T v)^2] for even g: sigma(t)^2 + sigma(-t)^2 = t^2
    (checked by sympy for t > 0 and t < 0), and x -> -x averages the two, q = 1/2."""
    import sympy as sp

    relu = lambda u: sp.Max(u, 0)  # noqa: E731
    for t in (sp.Symbol("t", positive=True), sp.Symbol("t", negative=True)):
        if sp.simplify(relu(t) ** 2 + relu(-t) ** 2 - t**2) != 0:
            raise ValueError("t: sigma(t)^2 + sigma(-t)^2 != t^2")
    return sp.Rational(1, 2)


@cache
def derive_loss():
    """f(A) = E[y_q^2] + 2 E[y_q r] + E[r^2] (module docstring, steps 1-4)."""
    import sympy as sp

    from ..gaussian import expectation

    v = variables()
    p, q = stein_factor(), halving_factor()
    x, xq, w, A, n = v.x, v.x_q, v.w, v.A, v.n
    yy = expectation(w.row, xq.col, xq.row, w.col)                       # E[y_q^2]
    cross = p * expectation(xq.row, w.col, w.row, A, xq.col)            # E[y_q y_i sigma_i]
    pair = p**2 * expectation(xq.row, A.T, w.col, w.row, A, xq.col)     # E[y_i s_i y_j s_j], i != j
    diag = q * expectation(w.row, x.col, x.row, w.col, x.row, A, xq.col, xq.row, A.T, x.col)
    r2 = ((n - 1) * pair + diag) / n
    f = sp.expand((yy + 2 * cross + r2).doit())  # Trace(I) -> D
    return sp.expand(f.xreplace({sp.Trace(A * A.T): sp.Trace(A.T * A)}))  # tr(A A^T) = tr(A^T A)


def curvature():
    """c, the coefficient of ||A||_F^2 = tr(A^T A) in f(A)."""
    import sympy as sp

    A = variables().A
    c = derive_loss().coeff(sp.Trace(A.T * A))
    return sp.factor(c)


@cache
def _scalar_optimum():
    """Minimise f(a I) over a (f convex in A with gradient 2 c A + I: the minimiser is a I)."""
    import sympy as sp

    from ..matrices import spectral, trace_symbol

    v = variables()
    a = sp.Symbol("a", real=True)
    # A = a I: the spectral map A -> a, with tr(A^k) -> D a^k
    f = spectral(derive_loss(), v.A, a).xreplace({trace_symbol(k): v.D * a**k for k in (1, 2)})
    if f.has(*[trace_symbol(k) for k in range(3, 9)]):
        raise ValueError("A: unexpected higher trace in f(A)")
    (a_star,) = sp.solve(sp.diff(f, a), a)
    return sp.factor(a_star), sp.factor(f.subs(a, a_star))


def gradient():
    """df/dA (sympy matrix calculus, term by term): 2 c A + I."""
    import sympy as sp

    A = variables().A
    terms = [sp.diff(t, A) for t in sp.Add.make_args(derive_loss()) if t.has(A)]
    return sp.MatAdd(*terms).doit()


def stationarity_residual():
    """Spectral image of df/dA at A = a* I (zero: a* I is the stationary point of the convex f)."""
    import sympy as sp

    from ..matrices import spectral

    v = variables()
    a_star = _scalar_optimum()[0]
    return sp.simplify(spectral(gradient(), v.A, sp.Symbol("a", real=True)).subs(
        sp.Symbol("a", real=True), a_star))


def derive_optimal_scale():
    from . import sym

    return _scalar_optimum()[0].xreplace({variables().D: sym("d")})


def derive_optimal_loss():
    from . import sym

    return _scalar_optimum()[1].xreplace({variables().D: sym("d")})


def printed_optimal_scale():
    """Theorem 5: -1 / ((1/2)(n-1)/n + (d+2)/n)."""
    import sympy as sp

    from . import sym

    n, d = sym("n"), sym("d")
    return -1 / (sp.Rational(1, 2) * (n - 1) / n + (d + 2) / n)


register(ClosedForm(
    id="preconditioned_gd.relu.loss",
    title="In-context loss f(A) of one ReLU-attention layer, P = E_{d+1,d+1}, Q = [[A, 0], [0, 0]]",
    source="Theorem 5, App. A.4 (exact loss [derived]; cf. eq. 24)",
    status="exact",
    params=(N_CTX, A_BLOCK),
    derive=derive_loss,
    doc="f(A) = c ||A||_F^2 + tr(A) + d, c = (n + 2d + 3)/(4n), d = the size of A; x, w* ~ N(0, I), "
        "any real A (Stein's lemma and the symmetry sigma(t)^2 + sigma(-t)^2 = t^2, see the module "
        "docstring). Eq. 24 has the same c and tr term for the lower bound f_lower. Proof gap in the "
        "paper: eq. 23 drops E(w*^T D x)^2 = tr(D^2) as a constant, but D = diag(U^T V) depends on the "
        "SVD factors of A (the bound can be made 0 at A = 0 by choosing them); the exact f(A) here "
        "closes the gap. A nonzero b_x (value weights on the x-rows) only adds a nonnegative term.",
))

register(ClosedForm(
    id="preconditioned_gd.relu.optimal_scale",
    title="a* of the ReLU-attention global minimiser A* = a* I",
    source="Theorem 5",
    status="exact",
    params=(N_CTX, D_DIM),
    derive=derive_optimal_scale,
    printed=printed_optimal_scale,
    doc="a* = -1/(2c) = -2n/(n + 2d + 3); Q_0 = a* [[I_d, 0], [0, 0]] with P_0 = E_{d+1,d+1} "
        "(the mirror P_0 -> -P_0, A -> -A is also optimal). Linear attention's optimum is "
        "-n/(n + d + 1) in the same convention: the ReLU halves the effective signal and the "
        "curvature differently.",
))

register(ClosedForm(
    id="preconditioned_gd.relu.optimal_loss",
    title="f*, the ReLU-attention single-layer loss at the global minimum",
    source="Theorem 5 (value not stated in the paper [derived])",
    status="exact",
    params=(N_CTX, D_DIM),
    derive=derive_optimal_loss,
    doc="f* = d - d/(4c) = d(2d + 3)/(n + 2d + 3); n = 20, d = 5: 65/33 = 1.9697 (linear "
        "attention: 15/13 = 1.1538).",
))
