"""L-layer linear transformers on the critical set of Theorem 3 (Ahn, Cheng, Daneshmand, Sra 2023), any depth.

Setting (§4.2, Theorem 3): covariates ``x ~ N(0, Sigma)``, task ``w* ~ N(0, Sigma^{-1})``,
noiseless labels, ``n`` context examples, the sparse layers of eq. 8
``P_l = E_{d+1,d+1}``, ``Q_l = -[[A_l, 0], [0, 0]]`` with step sizes ``a_l`` in the eq.-8
convention (the ``1/n`` of the attention included), loss ``f = E (TF_L - y_q)^2`` (no 1/2;
the "+" of eq. 5 is a sign typo). By Lemma 1 (with ``A_l^T``, equal to ``A_l`` here) the
transformer runs preconditioned GD ``w_{l+1} = w_l - A_l S (w_l - w*)``, ``TF_L = <x_q, w_L>``.

What is derived here (not retyped):

* the exact loss on ``S = {A_l = a_l Sigma^{-1}}``: whitening ``x = W u``, ``w* = W^{-T} v``
  (``Sigma = W W^T``) gives ``TF_L - y_q = -u_q^T prod_l (I - a_l S_u) v``, so with
  ``E[v v^T] = E[u_q u_q^T] = I``, ``f(a) = E tr prod_l (I - a_l S_u)^2`` (the factors commute),
  ``= sum_{j,k} c_j c_k m_{j+k}`` with ``prod_l (1 - a_l s) = sum_k c_k s^k`` and the Wishart
  moments ``m_k = E tr S_u^k`` of :mod:`theory.preconditioned_gd.wishart` (whitening, App. B.2).
  Sigma drops out. Equivalently ``f = int r^2 dmu`` over the expected spectral measure ``mu`` of
  ``S_u``, ``r(s) = prod_l (1 - a_l s)``;
* the optimal steps: ``f`` is ``int p^2 dmu`` over polynomials ``p(0) = 1`` of degree ``L``,
  minimised by the kernel polynomial ``c_{1..L} = -H^{-1} g``, ``H_{jk} = m_{j+k}``, ``g_k = m_k``;
  ``a_l = 1 / root_l(p)`` and ``f*_L = d - g^T H^{-1} g``. The roots are the zeros of the
  degree-``L`` orthogonal polynomial of ``s mu(ds)``: real, positive and distinct for every ``L``
  (so the infimum of Theorem 3 is attained, against Footnote 2's caution);
* the gradient on ``S``: ``grad_{A_l} f = g_l Sigma`` (Theorem 3's proof, B.2: the rotation
  average of the gradient), hence ``df/da_l = <grad_{A_l} f, Sigma^{-1}> = d g_l``;
* plain GD with one step ``eta`` (``A_l = eta I``, App. D's baseline) at a general Sigma:
  ``f = E tr(Sigma p(S) Sigma^{-1} p(S))`` with ``p(s) = (1 - eta s)^L``, a polynomial in ``n`` and
  the power traces ``tr Sigma^c`` (:mod:`theory.preconditioned_gd.correlated_wishart`), and its
  optimal step;
* Theorem 2 (two layers, ``Sigma = I``, symmetric ``A_l``): the optimum is scalar
  ``A_l = a_l I``, the ``L = 2`` case of the above with ``a_0 + a_1 = -c_1``, ``a_0 a_1 = c_2``.

How the records evaluate (any ``L <= MAX_DEPTH = 12``)
------------------------------------------------------
At the integers ``n, d`` the moments are exact fractions (the loop equations), and so are the
recurrence coefficients of ``mu`` (:mod:`theory.preconditioned_gd.spectral_measure`). Then

* ``loss`` and ``gradient_scales``: the ``(L + 1)``-point Gauss rule of ``mu`` integrates
  ``r^2`` (degree ``2L``) and ``r dr/da_l`` exactly, ``f = sum_i w_i r(s_i)^2`` with positive
  weights, a sum of positive terms; evaluated in ``e = s - 1`` (nodes of the exactly shifted
  Jacobi matrix, ``r = prod_l ((1 - a_l) - a_l e)``), so that at large ``n`` (``S_u -> I``) the small
  quantities are kept apart. (The earlier L <= 3 form expanded the loss in central moments for the
  same reason.)
* ``optimal_steps``: ``a_l = 1 / (1 + e_l)`` with ``e_l`` the eigenvalues of the shifted Jacobi
  matrix of ``s mu(ds)`` (the kernel polynomial's zeros, minus 1), ascending in ``a``;
* ``optimal_loss``: the Christoffel function ``1 / sum_{j<=L} pi_j(0)^2 / h_j``, an exact fraction,
  rounded once.

Cost of the first call at a new ``(n, d)`` (one core; memoised per process): ``L = 4`` 1 ms,
``L = 8`` 0.05 s, ``L = 12`` 0.2 s (the moments ``m_0..m_{2L+1}``); later calls at the same
``(n, d)`` cost the Gauss rule only (~0.1 ms). The symbolic forms (:func:`optimal_kernel`,
:func:`derive_optimal_loss_of`, any ``L``) are rational functions of ``n, d``: ``L = 4`` 0.3 s.
For ``L <= 3`` the optimal steps also have radical forms (:func:`optimal_steps_of`: quadratic
formula, Viete's cubic), checked against the kernel roots by
``preconditioned_gd.multi_layer.steps_are_kernel_roots``.

Contains
--------
``preconditioned_gd.multi_layer.loss``, ``.optimal_steps``, ``.optimal_loss``,
``.gradient_scales`` (Theorem 3, any ``L <= 12``), ``.gd_loss``, ``.gd_optimal_step``,
``.gd_optimal_loss`` (plain GD at a general Sigma, ``L <= 5``). The moments are
:mod:`theory.preconditioned_gd.wishart`, Theorem 2's two-layer optimum
:mod:`theory.preconditioned_gd.two_layer`, Theorem 4's GD++ :mod:`theory.preconditioned_gd.gdpp`.

References
----------
.. [1] K. Ahn, X. Cheng, H. Daneshmand, S. Sra, "Transformers learn to implement
   preconditioned gradient descent for in-context learning", NeurIPS 2023,
   Theorems 2 and 3, Lemmas 1 and 4, Footnote 2, App. B.1-B.2, App. D (Figs. 6-7).
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache

from ..params import covariance, index, real, steps
from ..registry import ClosedForm, register
from .spectral_measure import christoffel_at_zero, gauss_rule, kernel_zeros
from .wishart import D_DIM, N_CTX, moments, to_number, trace_moment

__all__ = ["MAX_DEPTH", "GD_MAX_DEPTH", "moments", "kernel_coefficients", "spectral_loss", "loss_polynomial",
           "optimal_kernel", "derive_optimal_loss_of", "optimal_steps_of", "stable_optimal_steps_of",
           "spectral_loss_value", "spectral_gradient", "optimal_steps_value", "optimal_loss_value",
           "gd_loss_coefficients", "gd_loss_value", "gd_optimal_step_value"]

#: Largest number of layers of the Theorem-3 records (moments m_0..m_25; first call at a new (n, d)
#: about 0.2 s). The loop equations go further (:mod:`theory.preconditioned_gd.wishart`).
MAX_DEPTH = 12
#: Largest number of plain-GD steps of the gd_* records (the correlated-Wishart words of depth 2L:
#: L = 4 0.4 s, L = 5 5 s, first call per process).
GD_MAX_DEPTH = 5

LAYERS = index("L", f"Number of layers, 1 <= L <= {MAX_DEPTH}.", low=1, high=MAX_DEPTH, sample=(1, 6))
STEPS = steps("a", "Step sizes a_0, ..., a_{L-1} of the layers (A_l = a_l Sigma^{-1}, eq.-8 convention "
                   f"including the 1/n); one entry per layer, L <= {MAX_DEPTH}.", high=MAX_DEPTH)
GD_SIGMA = covariance("Sigma", "Covariance of the covariates x (w* ~ N(0, Sigma^{-1})).")
GD_STEP = real("eta", "Step size of plain GD, w_{l+1} = w_l - eta S (w_l - w*) (A_l = eta I; the gradient "
                      "of R(w) = (1/2n) sum (w^T x_i - y_i)^2).", sample=(0.02, 1.0))
GD_LAYERS = index("L", f"Number of GD steps (layers), 1 <= L <= {GD_MAX_DEPTH}.", low=1, high=GD_MAX_DEPTH,
                  sample=(1, 3))


def _sym(name):
    from . import sym

    return sym(name)


# -- the loss as a polynomial (symbolic, any L) ---------------------------------------------
def kernel_coefficients(a) -> list:
    """Coefficients ``c_0..c_L`` of ``prod_l (1 - a_l s)`` (``c_0 = 1``)."""
    import sympy as sp

    s = sp.Dummy("s")
    poly = sp.Poly(sp.Mul(*[1 - al * s for al in a]), s)
    return [poly.coeff_monomial(s**k) for k in range(len(a) + 1)]


def spectral_loss(c, m):
    """``sum_{j,k} c_j c_k m_{j+k}``: ``E tr p(S_u)^2`` for ``p(s) = sum_k c_k s^k``."""
    import sympy as sp

    return sp.Add(*[c[j] * c[k] * m[j + k] for j in range(len(c)) for k in range(len(c))])


@cache
def loss_polynomial(L: int):
    """``f(a_0, ..., a_{L-1}) = E tr prod_l (I - a_l S_u)^2`` as a polynomial in the steps (symbols
    ``a_0..a_{L-1}``, ``L <= 8``) with coefficients rational in ``n, d``."""
    if not isinstance(L, int) or not 1 <= L <= 8:
        raise ValueError(f"L: expected an integer 1..8 (the symbols a_0..a_7), got {L!r}")
    a = [_sym(f"a_{l}") for l in range(L)]
    return spectral_loss(kernel_coefficients(a), moments(2 * L))


# -- the optimum over S -------------------------------------------------------------------
def _hankel(M, L: int, start: int):
    """``(M_{i+j+start})_{i,j<L}`` as a DomainMatrix over ZZ[d, n] (fast exact determinants)."""
    import sympy as sp
    from sympy.polys.matrices import DomainMatrix

    return DomainMatrix.from_Matrix(sp.Matrix(L, L, lambda i, j: M[i + j + start]))


def _ratio(K, num, den):
    """``num / den`` (elements of the polynomial ring ``K``) in lowest terms, as sympy."""
    g = K.gcd(num, den)
    return K.to_sympy(K.exquo(num, g)) / K.to_sympy(K.exquo(den, g))


@cache
def optimal_kernel(L: int) -> tuple:
    """``(c_1, ..., c_L)`` of the kernel polynomial: ``c = -H^{-1} g`` with ``H_{jk} = m_{j+k}``,
    ``g_k = m_k`` (``j, k = 1..L``), as reduced rational functions of ``n, d``.

    Solved with the unnormalised moments ``M_k = E tr W^k = n^k m_k`` (polynomials): with
    ``Dn = diag(n^-j)``, ``H = Dn Mh Dn`` and ``g = Dn Mg``, so ``c_j = -n^j (Mh^{-1} Mg)_j``,
    by the adjugate over the polynomial ring ``ZZ[d, n]``.
    """
    n, d = _sym("n"), _sym("d")
    M = [trace_moment(k, n, d) for k in range(2 * L + 1)]
    H = _hankel(M, L, 2)
    K = H.domain
    g = [K.from_sympy(M[k + 1]) for k in range(L)]
    det, adj = H.det(), H.adjugate()
    y = [sum((adj[j, k].element * g[k] for k in range(L)), K.zero) for j in range(L)]
    return tuple(_ratio(K, K.from_sympy(-n ** (j + 1)) * y[j], det) for j in range(L))


@cache
def derive_optimal_loss_of(L: int):
    """``f*_L = d - g^T H^{-1} g`` (the kernel polynomial's loss).

    The Schur complement of ``H`` in the full Hankel matrix ``(m_{i+j})_{i,j=0..L}``
    (``m_0 = d``), so ``f*_L = det(m_{i+j})_{0..L} / det(m_{i+j})_{1..L}``; the powers of
    ``n`` cancel between the two, so it is computed with ``M_k = E tr W^k``.
    """
    n, d = _sym("n"), _sym("d")
    M = [trace_moment(k, n, d) for k in range(2 * L + 1)]
    full, minor = _hankel(M, L + 1, 0), _hankel(M, L, 2)
    K = full.domain.unify(minor.domain)
    return _ratio(K, K.convert(full.det()), K.convert(minor.det()))


def _kernel_polynomials(L: int) -> tuple:
    """The kernel coefficients as ``c_k = (-1)^k n^k N_k / B`` with polynomials ``N_1..N_L`` and
    ``B`` of ``ZZ[n, d]`` (one common denominator: the Hankel determinant), as sympy expressions."""
    import sympy as sp

    n, d = _sym("n"), _sym("d")
    parts = [sp.fraction(sp.cancel(x)) for x in optimal_kernel(L)]
    B = parts[0][1]
    out = []
    for k, (num, den) in enumerate(parts, start=1):
        N, rem = sp.div(sp.Poly((-1) ** k * num * B, n, d), sp.Poly(den * n**k, n, d))
        assert rem.is_zero
        out.append(N.as_expr())
    return tuple(out), B


def _ratios():
    """``X = n/z``, ``Y = d/z``, ``U = 1/z`` (``z = n + d + 1``; all in (0, 1)) as ``UnevaluatedExpr``:
    printed and evaluated as ratios, not expanded into powers of n and d."""
    import sympy as sp

    n, d = _sym("n"), _sym("d")
    z = n + d + 1
    return tuple(sp.UnevaluatedExpr(t) for t in (n / z, d / z, 1 / z))


def _scaled(poly, k: int):
    """``poly(n, d) / z^k`` with ``z = n + d + 1``, as ``sum c_ij X^i Y^j U^(k-i-j)`` over the
    monomials ``c_ij n^i d^j`` of ``poly`` (:func:`_ratios`; ``k`` at least its total degree).

    Evaluated as powers of numbers below 1, so nothing overflows at n, d ~ 2**53; unwrapped,
    sympy expands each term to ``c_ij n^i d^j z^-k``."""
    import sympy as sp

    n, d = _sym("n"), _sym("d")
    X, Y, U = _ratios()
    P = sp.Poly(poly, n, d)
    if P.total_degree() > k:
        raise ValueError(f"k: {k} is below the total degree {P.total_degree()}")
    return sp.Add(*[sp.Integer(c) * X**i * Y**j * U ** (k - i - j) for (i, j), c in P.terms()])


@cache
def _step_polynomials(L: int) -> dict:
    """The polynomials of ``ZZ[n, d]`` in which the optimal steps are written without cancellation.

    ``L = 2``: ``c_1 = -n P/D``, ``c_2 = n^2 R/D``; the discriminant is ``c_1^2 - 4 c_2 = n^2 Q/D^2``
    with ``Q = P^2 - 4 R D``, so the steps are ``n (P -+ sqrt Q)/(2D)``, the smaller one as
    ``c_2`` over the larger: ``2 n R/(P + sqrt Q)``.

    ``L = 3``: ``c_1 = -n P/B``, ``c_2 = n^2 R/B``, ``c_3 = -n^3 E/B``; the depressed cubic
    ``t^3 + p t + q`` (``a = t - c_1/3``) has ``p = -n^2 A/(3 B^2)``, ``q = -4 n^3 C/(27 B^3)`` with
    ``A = P^2 - 3 R B``, ``C = (2 P^3 - 9 P R B + 27 E B^2)/4``. Subtracting ``c_1^2/3`` from
    ``c_2`` in floating point cancels (all three steps tend to 1 as n grows; p ~ 1/n): here it
    is cancelled exactly. A, C, P, R, E have positive coefficients (checked); B is positive for
    n, d >= 1.
    """
    import sympy as sp

    n, d = _sym("n"), _sym("d")
    (P, R, *rest), den = _kernel_polynomials(L)
    out = {"P": P, "R": R, "B": den}
    if L == 2:
        out["Q"] = sp.expand(P**2 - 4 * R * den)
    elif L == 3:
        (E,) = rest
        out["E"] = E
        out["A"] = sp.expand(P**2 - 3 * R * den)
        out["C"] = sp.expand((2 * P**3 - 9 * P * R * den + 27 * E * den**2) / 4)
    for name in ("P", "R", "E", "A", "C", "Q"):
        if name in out:
            assert all(c > 0 for c in sp.Poly(out[name], n, d).coeffs()), name
    return out


#: Degrees at which the L = 3 polynomials are scaled by ``z = n + d + 1`` (their total degrees;
#: P/B, A/B^2, C/A^(3/2) and E B/P^2 are then unchanged, up to the factor n = X z).
_DEGREES_L3 = {"P": 8, "A": 16, "B": 9, "C": 24, "E": 6}


@cache
def optimal_steps_of(L: int) -> tuple:
    """The L optimal steps in ascending order: the roots of ``q(a) = a^L + c_1 a^{L-1} + ... + c_L``
    (``a = 1/s`` for each root ``s`` of the kernel polynomial ``p``).

    ``L = 1``: ``-c_1``; ``L = 2``: the quadratic formula; ``L = 3``: the trigonometric
    (Viete) form of the three real roots of a cubic, real arithmetic only. The roots are real,
    positive and distinct: they are the reciprocals of the zeros of the degree-L orthogonal
    polynomial of ``s mu(ds)`` (kernel polynomial), inside the support of ``mu``.

    Written without cancellation (see :func:`_step_polynomials`): the discriminant and the
    depressed cubic's p, q are reduced to polynomials with positive coefficients; the L = 3
    polynomials appear divided by ``z^degree, z = n + d + 1``. :func:`stable_optimal_steps_of` is the
    same expression with those ratios kept unexpanded for numerics (this one is it unwrapped).
    """
    import sympy as sp

    return tuple(e.replace(lambda x: isinstance(x, sp.UnevaluatedExpr), lambda x: x.args[0])
                 for e in stable_optimal_steps_of(L))


@cache
def stable_optimal_steps_of(L: int) -> tuple:
    """:func:`optimal_steps_of` with ``n/z``, ``d/z``, ``1/z`` as ``UnevaluatedExpr`` (``z = n + d + 1``):
    the L = 3 polynomials are evaluated as sums of positive terms bounded by their coefficients."""
    import sympy as sp

    n = _sym("n")
    if L == 1:
        return (-optimal_kernel(1)[0],)
    poly = _step_polynomials(L)
    if L == 2:
        P, R, D, Q = (poly[k] for k in ("P", "R", "B", "Q"))
        return (2 * n * R / (P + sp.sqrt(Q)), n * (P + sp.sqrt(Q)) / (2 * D))
    if L == 3:
        # Viete's trigonometric roots of t^3 + p t + q, with the reduced p, q above:
        # r = 2 sqrt(-p/3) = 2 n sqrt(A)/(3B), 3q/(p r) = 2C/A^(3/2), shift -c_1/3 = n P/(3B).
        # Every polynomial divided by z^degree (z = n + d + 1): the ratios are unchanged, and
        # no power overflows float64 at n, d ~ 2**53 (C has degree 24).
        h = {k: _scaled(poly[k], deg) for k, deg in _DEGREES_L3.items()}
        x = _ratios()[0]  # n/z
        theta = sp.acos(2 * h["C"] / h["A"] ** sp.Rational(3, 2))
        root = [h["P"] + 2 * sp.sqrt(h["A"]) * sp.cos(theta / 3 - 2 * sp.pi * k / 3) for k in range(3)]
        largest, middle = x * root[0] / (3 * h["B"]), x * root[1] / (3 * h["B"])
        # theta/3 in [0, pi/3]: k = 0 largest, k = 1 middle; the smallest (k = 2) as -c_3 over the
        # product of the other two (P + 2 sqrt(A) cos(theta/3 - 4 pi/3) cancels when the steps spread)
        smallest = 9 * x * h["E"] * h["B"] / (root[0] * root[1])
        return (smallest, middle, largest)
    raise ValueError(f"L: the radical forms exist for L <= 3, got {L}")


# -- numerics of the records (any L): Gauss rules of the exact spectral measure ----------------
def _residuals(a, e, backend):
    """``r_l(e) = (1 - a_l) - a_l e`` per layer (rows) at the nodes ``e`` (shifted by -1)."""
    if backend == "mpmath":
        import mpmath

        return [[(1 - mpmath.mpf(al)) - mpmath.mpf(al) * x for x in e] for al in a]
    import numpy as np

    return [(1.0 - al) - al * np.asarray(e) for al in a]


def spectral_loss_value(n: int, d: int, a, backend: str = "numpy"):
    """``f(a) = sum_i w_i prod_l ((1 - a_l) - a_l e_i)^2`` over the ``(L + 1)``-point Gauss rule of
    ``mu`` shifted by -1: exact (``r^2`` has degree ``2L <= 2(L + 1) - 1``), a sum of positive terms."""
    e, w = gauss_rule(n, d, len(a) + 1, shift=1, backend="mpmath" if backend == "mpmath" else "numpy")
    rows = _residuals(a, e, backend)
    if backend == "mpmath":
        import mpmath

        return mpmath.fsum(wi * mpmath.fprod(row[i] for row in rows) ** 2 for i, wi in enumerate(w))
    import numpy as np

    value = float(np.sum(w * np.prod(rows, axis=0) ** 2))
    return _as_backend(value, backend)


def spectral_gradient(n: int, d: int, a, backend: str = "numpy"):
    """``g_l = (df/da_l) / d = (2/d) sum_i w_i r(s_i) (-s_i) prod_{m != l} (1 - a_m s_i)`` (the same
    Gauss rule: the integrand has degree ``2L``)."""
    L = len(a)
    e, w = gauss_rule(n, d, L + 1, shift=1, backend="mpmath" if backend == "mpmath" else "numpy")
    rows = _residuals(a, e, backend)
    if backend == "mpmath":
        import mpmath

        out = []
        for l in range(L):
            terms = []
            for i, wi in enumerate(w):
                r = mpmath.fprod(row[i] for row in rows)
                rest = mpmath.fprod(row[i] for m, row in enumerate(rows) if m != l)
                terms.append(wi * r * (-(1 + e[i])) * rest)
            out.append(2 * mpmath.fsum(terms) / d)
        return mpmath.matrix(out)
    import numpy as np

    rows = np.array(rows)
    r = np.prod(rows, axis=0)
    out = np.array([2 * np.sum(w * r * (-(1 + e)) * np.prod(np.delete(rows, l, axis=0), axis=0)) / d
                    for l in range(L)])
    return _as_backend(out, backend)


def optimal_steps_value(n: int, d: int, L: int, backend: str = "numpy"):
    """The ``L`` optimal steps, ascending: ``1 / (1 + e)`` over the zeros ``1 + e`` of the kernel polynomial."""
    e = kernel_zeros(n, d, L, shift=1, backend="mpmath" if backend == "mpmath" else "numpy")
    if backend == "mpmath":
        import mpmath

        return mpmath.matrix(sorted(1 / (1 + x) for x in e))
    import numpy as np

    return _as_backend(np.sort(1.0 / (1.0 + np.asarray(e))), backend)


def optimal_loss_value(n: int, d: int, L: int, backend: str = "numpy"):
    """``f*_L``: the Christoffel function of ``mu`` at 0, exact, rounded once."""
    return to_number(christoffel_at_zero(n, d, L), backend)


def _as_backend(value, backend):
    if backend == "torch":
        import torch

        return torch.as_tensor(value, dtype=torch.float64)
    return value


def _steps_L(values, dims, backend="numpy"):
    return {"L": len(values["a"])}


def _eval_loss(backend, values, dims):
    return spectral_loss_value(int(values["n"]), int(values["d"]), values["a"], backend)


def _eval_gradient(backend, values, dims):
    return spectral_gradient(int(values["n"]), int(values["d"]), values["a"], backend)


def _eval_steps(backend, values, dims):
    return optimal_steps_value(int(values["n"]), int(values["d"]), int(values["L"]), backend)


def _eval_optimal_loss(backend, values, dims):
    return optimal_loss_value(int(values["n"]), int(values["d"]), int(values["L"]), backend)


# -- plain GD at a general Sigma (App. D's baseline) -----------------------------------------------
def gd_loss_coefficients(L: int, n, traces: dict) -> list:
    """``A_0..A_{2L}`` of ``f(eta) = sum_r A_r eta^r = E tr(Sigma p(S) Sigma^{-1} p(S))``,
    ``p(s) = (1 - eta s)^L``: ``A_r = (-1)^r n^{-r} sum_{j+k=r} C(L,j) C(L,k) T_jk`` with
    ``T_jk = E tr(Sigma W^j Sigma^{-1} W^k)`` evaluated at ``n`` and ``traces[c] = tr Sigma^c``
    (any number type: exact fractions, mpf, tensors)."""
    from math import comb

    from .correlated_wishart import evaluate_terms, gd_loss_terms

    terms = gd_loss_terms(L)
    T = {jk: evaluate_terms(poly, n, traces) for jk, poly in terms.items()}
    out = []
    for r in range(2 * L + 1):
        total = 0
        for j in range(max(0, r - L), min(L, r) + 1):
            k = r - j
            total = total + comb(L, j) * comb(L, k) * T[(min(j, k), max(j, k))]
        out.append((-1) ** r * total / n**r)
    return out


def _traces(Sigma, L: int, backend: str) -> dict:
    """``{c: tr Sigma^c}`` for ``c = 0..2L`` (exact fractions of the float64 eigenvalues for numpy,
    working precision for mpmath, differentiable matrix powers for torch)."""
    if backend == "mpmath":
        import mpmath

        out, P = {}, mpmath.eye(Sigma.rows)
        for c in range(2 * L + 1):
            out[c] = sum(P[i, i] for i in range(Sigma.rows))
            P = P * Sigma
        return out
    if backend == "torch":
        import torch

        S = Sigma.to(torch.float64) if isinstance(Sigma, torch.Tensor) else torch.as_tensor(Sigma, dtype=torch.float64)
        out, P = {}, torch.eye(S.shape[0], dtype=torch.float64, device=S.device)
        for c in range(2 * L + 1):
            out[c] = torch.trace(P)
            P = P @ S
        return out
    import numpy as np

    lam = [Fraction(float(x)) for x in np.linalg.eigvalsh(np.asarray(Sigma, dtype=float))]
    return {c: sum(x**c for x in lam) for c in range(2 * L + 1)}


def gd_loss_value(Sigma, n: int, eta, L: int, backend: str = "numpy"):
    """The plain-GD loss ``f(eta)`` (see :func:`gd_loss_coefficients`). numpy: the polynomial in ``eta``
    evaluated exactly at the float64 eigenvalues of Sigma and ``eta``, rounded once (an array of
    ``eta`` entry by entry); mpmath at the working precision; torch differentiable in Sigma and eta."""
    if backend == "numpy":
        import numpy as np

        A = gd_loss_coefficients(L, n, _traces(Sigma, L, backend))
        eta_arr = np.asarray(eta, dtype=float)
        flat = [to_number(sum(Ar * Fraction(float(x)) ** r for r, Ar in enumerate(A))) for x in eta_arr.ravel()]
        return flat[0] if eta_arr.ndim == 0 else np.array(flat).reshape(eta_arr.shape)
    if backend == "mpmath":
        import mpmath

        A = gd_loss_coefficients(L, mpmath.mpf(n), _traces(Sigma, L, backend))
        return mpmath.fsum(Ar * mpmath.mpf(eta) ** r for r, Ar in enumerate(A))
    import torch

    A = gd_loss_coefficients(L, float(n), _traces(Sigma, L, backend))
    eta = eta if isinstance(eta, torch.Tensor) else torch.as_tensor(eta, dtype=torch.float64)
    eta = eta.to(torch.float64)
    graph = sum(Ar * eta**r for r, Ar in enumerate(A))  # float64: cancels where f << its terms
    exact = gd_loss_value(_plain(Sigma), n, _plain(eta), L, "numpy")
    return graph + (torch.as_tensor(exact, dtype=torch.float64, device=graph.device) - graph.detach())


def _plain(x):
    """A tensor as a float64 numpy array (a value as it is)."""
    return x.detach().cpu().numpy() if hasattr(x, "detach") else x


def gd_optimal_step_value(Sigma, n: int, L: int, backend: str = "numpy"):
    """The step ``eta*`` minimising :func:`gd_loss_value` over all real ``eta``.

    The coefficients ``A_r`` exact (numpy: fractions of the float64 eigenvalues; mpmath: working
    precision), the real zeros of ``f'`` by ``mpmath.polyroots`` (at the working precision plus 20
    digits, at least 40), the one with the least ``f``. ``f -> oo`` as ``|eta| -> oo`` (``A_{2L} = E tr(
    Sigma S^L Sigma^{-1} S^L) / ... > 0``) and ``f'(0) = -2 L tr(Sigma) < 0``, so ``eta* > 0``. torch:
    the value of numpy, with the gradient of one Newton step ``eta* - f'(eta*)/f''(eta*)`` computed in
    torch with ``eta*`` detached: the implicit-function derivative (``f'(eta*) = 0``)."""
    import mpmath

    if backend == "torch":
        import torch

        eta0 = torch.as_tensor(gd_optimal_step_value(_plain(Sigma), n, L, "numpy"), dtype=torch.float64)
        A = gd_loss_coefficients(L, float(n), _traces(Sigma, L, "torch"))
        d1 = sum(r * Ar * eta0 ** (r - 1) for r, Ar in enumerate(A) if r >= 1)
        d2 = sum(r * (r - 1) * Ar * eta0 ** (r - 2) for r, Ar in enumerate(A) if r >= 2)
        newton = -d1 / d2
        return eta0 + (newton - newton.detach())
    dps = max(40, mpmath.mp.dps + 20)
    with mpmath.workdps(dps):
        if backend == "mpmath":
            A = gd_loss_coefficients(L, mpmath.mpf(n), _traces(Sigma, L, "mpmath"))
        else:
            exact = gd_loss_coefficients(L, n, _traces(Sigma, L, "numpy"))
            A = [mpmath.mpf(x.numerator) / x.denominator for x in exact]
        deriv = [r * A[r] for r in range(2 * L, 0, -1)]  # f' highest degree first
        roots = mpmath.polyroots(deriv, maxsteps=200, extraprec=2 * dps) if len(deriv) > 2 else [-deriv[1] / deriv[0]]
        scale = max(abs(x) for x in roots)
        real = [mpmath.re(x) for x in roots if abs(mpmath.im(x)) <= mpmath.mpf(10) ** (-dps // 2) * (1 + scale)]

        def f(x):
            return mpmath.fsum(Ar * x**r for r, Ar in enumerate(A))

        best = min(real, key=f)
    return +best if backend == "mpmath" else float(best)


def _eval_gd_loss(backend, values, dims):
    return gd_loss_value(values["Sigma"], int(values["n"]), values["eta"], int(values["L"]), backend)


def _eval_gd_step(backend, values, dims):
    return gd_optimal_step_value(values["Sigma"], int(values["n"]), int(values["L"]), backend)


def _eval_gd_optimal_loss(backend, values, dims):
    Sigma, n, L = values["Sigma"], int(values["n"]), int(values["L"])
    eta = gd_optimal_step_value(Sigma, n, L, backend)
    if backend == "torch":
        eta = eta.detach()  # envelope theorem: d f(eta*(Sigma), Sigma) = partial_Sigma f
    return gd_loss_value(Sigma, n, eta, L, backend)


# -- records ------------------------------------------------------------------------------
def _idx(*names):
    import sympy as sp

    return [sp.Symbol(x, integer=True, nonnegative=True) for x in names]


def derive_loss():
    """The defining relation: ``f = sum_{j,k=0}^{L} c_j c_k m_{j+k}``, ``sum_k c_k s^k = prod_l (1 - a_l s)``."""
    import sympy as sp

    L = _sym("L")
    j, k = _idx("j", "k")
    c, m = sp.Function("c"), sp.Function("m")
    return sp.Eq(sp.Function("f")(L), sp.Sum(c(j) * c(k) * m(j + k), (j, 0, L), (k, 0, L)))


def derive_gradient_scales():
    """``g_l = (1/d) df/da_l = (2/d) sum_{j,k} c_j (dc_k/da_l) m_{j+k}``."""
    import sympy as sp

    L, d = _sym("L"), _sym("d")
    j, k = _idx("j", "k")
    c, dc, m = sp.Function("c"), sp.Function("dc_da"), sp.Function("m")
    return sp.Eq(sp.Function("g")(L), 2 * sp.Sum(c(j) * dc(k) * m(j + k), (j, 0, L), (k, 0, L)) / d)


def derive_optimal_steps():
    """``a*_l = 1 / theta_l``, ``theta_l`` the zeros of the degree-L orthogonal polynomial of ``s mu(ds)``."""
    import sympy as sp

    L = _sym("L")
    return sp.Eq(sp.Function("a_star")(L), 1 / sp.Function("zeros_of_pi_s")(L))


def derive_optimal_loss():
    """``f*_L = 1 / sum_{j=0}^{L} pi_j(0)^2 / h_j`` (= ``d - g^T H^{-1} g``)."""
    import sympy as sp

    L = _sym("L")
    (j,) = _idx("j")
    pi0, h = sp.Function("pi_at_0"), sp.Function("h")
    return sp.Eq(sp.Function("f_star")(L), 1 / sp.Sum(pi0(j) ** 2 / h(j), (j, 0, L)))


def derive_gd_loss():
    """``f = sum_{j,k=0}^{L} C(L,j) C(L,k) (-eta)^{j+k} E tr(Sigma W^j Sigma^{-1} W^k) / n^{j+k}``."""
    import sympy as sp

    L, n, eta = _sym("L"), _sym("n"), _sym("eta")
    j, k = _idx("j", "k")
    T = sp.Function("E_tr_Sigma_Wj_Sigmainv_Wk")
    return sp.Eq(sp.Function("f")(L), sp.Sum(sp.binomial(L, j) * sp.binomial(L, k) * (-eta) ** (j + k) * T(j, k)
                                              / n ** (j + k), (j, 0, L), (k, 0, L)))


def derive_gd_optimal_step():
    import sympy as sp

    L = _sym("L")
    return sp.Eq(sp.Function("eta_star")(L), sp.Function("argmin_eta")(sp.Function("f")(L)))


def derive_gd_optimal_loss():
    import sympy as sp

    L = _sym("L")
    return sp.Eq(sp.Function("f_star")(L), sp.Function("min_eta")(sp.Function("f")(L)))


_COST = ("Cost of the first call at a new (n, d): L = 4 about 1 ms, L = 8 0.05 s, L = 12 0.2 s (exact moments "
         "m_0..m_{2L+1} by the loop equations, memoised); later calls at the same (n, d) ~0.1 ms.")

register(ClosedForm(
    id="preconditioned_gd.multi_layer.loss",
    title=f"Loss of L <= {MAX_DEPTH} sparse layers on the set A_l = a_l Sigma^{{-1}}",
    source="Theorem 3, eq. 8 and App. B.2 [loss derived]",
    status="exact",
    params=(N_CTX, D_DIM, STEPS),
    derive=derive_loss,
    derived=_steps_L,
    derived_names=("L",),
    evaluate=_eval_loss,
    example={"n": 20, "d": 5, "a": [0.4224, 0.6891, 1.7142]},
    doc="x ~ N(0, Sigma), w* ~ N(0, Sigma^{-1}), noiseless; f = E (TF_L - y_q)^2 with "
        "TF_L = <x_q, w_L> after L preconditioned-GD steps with A_l = a_l Sigma^{-1}. "
        "f(a) = E tr prod_l (I - a_l S_u)^2 = sum_{j,k} c_j c_k m_{j+k} (prod_l (1 - a_l s) = sum c_k s^k), "
        "independent of Sigma; L = len(a). Evaluated exactly as sum_i w_i prod_l ((1 - a_l) - a_l e_i)^2 over "
        "the (L+1)-point Gauss rule (nodes 1 + e_i, positive weights) of the expected spectral measure of S_u, "
        "built from the exact moments. A layer with a_l = 0 is the identity. Symmetric in the a_l (Lemma 4: "
        "the layers commute on S). " + _COST,
))

register(ClosedForm(
    id="preconditioned_gd.multi_layer.optimal_steps",
    title=f"Optimal step sizes on S (ascending), any L <= {MAX_DEPTH}",
    source="Theorem 3, Footnote 2 [values derived: kernel polynomial]",
    status="exact",
    params=(N_CTX, D_DIM, LAYERS),
    derive=derive_optimal_steps,
    evaluate=_eval_steps,
    output="vector",
    length=lambda values, dims: int(values["L"]),
    example={"n": 20, "d": 5, "L": 3},
    doc="The minimiser of f over S: a_l = 1/root_l of the kernel polynomial p(s) = 1 + sum c_k s^k, "
        "c = -H^{-1} g (H_{jk} = m_{j+k}, g_k = m_k), whose roots are the zeros of the degree-L orthogonal "
        "polynomial of s mu(ds): real, positive, distinct for every L, so the infimum of Theorem 3 is attained "
        "(Footnote 2's caution is not needed). Computed as the eigenvalues 1 + e_l of the exactly shifted "
        "Jacobi matrix of s mu(ds). n = 20, d = 5: L = 1: 10/13; L = 2: 0.515371, 1.249572; L = 3: 0.422409, "
        "0.689126, 1.714217; L = 4: 0.362057, 0.520499, 0.888982, 2.138845. Any order of them is optimal "
        "(Lemma 4). L <= 3 also in radicals (optimal_steps_of). " + _COST,
))

register(ClosedForm(
    id="preconditioned_gd.multi_layer.optimal_loss",
    title=f"Optimal loss on S, f*_L = d - g^T H^{{-1}} g, any L <= {MAX_DEPTH}",
    source="Theorem 3 [value derived]",
    status="exact",
    params=(N_CTX, D_DIM, LAYERS),
    derive=derive_optimal_loss,
    evaluate=_eval_optimal_loss,
    example={"n": 20, "d": 5, "L": 3},
    doc="The Christoffel function of the expected spectral measure of S_u at 0, 1/sum_{j<=L} pi_j(0)^2/h_j "
        "(pi_j monic orthogonal, h_j their squared norms), an exact fraction at integer n, d, rounded once; "
        "equal to d - g^T H^{-1} g = det(m_{i+j})_{0..L} / det(m_{i+j})_{1..L}. L = 1: d(d+1)/(n+d+1) (the "
        "single-layer optimum under w* ~ N(0, Sigma^{-1})). n = 20, d = 5: 15/13 = 1.153846, 1795/4969 = "
        "0.361240, 12138645/90852389 = 0.133608, L = 4: 0.054953 (App. D, Fig. 7's optimal-step PGD). " + _COST,
))

register(ClosedForm(
    id="preconditioned_gd.multi_layer.gradient_scales",
    title="Gradient on S: grad_{A_l} f = g_l Sigma, the scalars g_0..g_{L-1}",
    source="Theorem 3 and App. B.2 [g_l derived]",
    status="exact",
    params=(N_CTX, D_DIM, STEPS),
    derive=derive_gradient_scales,
    evaluate=_eval_gradient,
    output="vector",
    length=lambda values, dims: len(values["a"]),
    derived=_steps_L,
    derived_names=("L",),
    example={"n": 20, "d": 5, "a": [0.3, 0.9, 0.5]},
    doc="Frobenius gradient with respect to the full d x d matrix A_l at A = (a_l Sigma^{-1}). "
        "B.2's rotation argument makes it proportional to Sigma; pairing with the direction "
        "Sigma^{-1} of S gives df/da_l = tr(g_l Sigma Sigma^{-1}) = d g_l. Evaluated on the same Gauss rule as "
        "the loss (the integrand r dr/da_l has degree 2L). Zero at the optimal steps (the critical points of "
        "Theorem 3). " + _COST,
))

_GD = ("Plain L-step GD w_{l+1} = w_l - eta S (w_l - w*), w_0 = 0 (the sparse transformer with A_l = eta I; App. D's "
       "'GD' baseline; the authors' code steps on the unnormalised gradient X^T X w - X^T y, i.e. eta/n in this "
       "convention) at x ~ N(0, Sigma), w* ~ N(0, Sigma^{-1}): f = E tr(Sigma p(S) Sigma^{-1} p(S)), p(s) = "
       "(1 - eta s)^L, a polynomial in eta whose coefficients are polynomials in n and tr Sigma^c (c <= 2L), "
       "derived by the correlated-Wishart loop equations. At Sigma = I it is the loss on S with every step eta "
       "(Sigma^{-1}-preconditioned GD with one constant step, App. D's 'PGD'). Cost: the words of depth 2L, "
       "first call per process: L <= 3 0.03 s, L = 4 0.4 s, L = 5 5 s; then exact evaluation ~1 ms.")

register(ClosedForm(
    id="preconditioned_gd.multi_layer.gd_loss",
    title=f"Loss of L <= {GD_MAX_DEPTH} plain GD steps with step eta at covariance Sigma (w* ~ N(0, Sigma^{{-1}}))",
    source="App. D, Figs. 6-7 (GD baseline) [derived]",
    status="exact",
    params=(GD_SIGMA, N_CTX, GD_STEP, GD_LAYERS),
    derive=derive_gd_loss,
    evaluate=_eval_gd_loss,
    example={"Sigma": [1.0, 1.0, 0.25, 0.0625, 1.0], "n": 20, "eta": 0.5, "L": 3},
    doc=_GD + " numpy: the polynomial evaluated exactly at the float64 eigenvalues of Sigma and eta, rounded "
              "once (arrays of eta entry by entry); torch: differentiable in Sigma (tr Sigma^c by matrix powers) "
              "and eta.",
))

register(ClosedForm(
    id="preconditioned_gd.multi_layer.gd_optimal_step",
    title=f"Optimal constant step eta* of L <= {GD_MAX_DEPTH} plain GD steps at covariance Sigma",
    source="App. D, Figs. 6-7 (GD baseline with the best step) [derived]",
    status="exact",
    params=(GD_SIGMA, N_CTX, GD_LAYERS),
    derive=derive_gd_optimal_step,
    evaluate=_eval_gd_step,
    example={"Sigma": [1.0, 1.0, 0.25, 0.0625, 1.0], "n": 20, "L": 3},
    doc="argmin over real eta of preconditioned_gd.multi_layer.gd_loss: the real zero of f'(eta) (degree 2L - 1, "
        "exact coefficients, mpmath.polyroots at >= 40 digits) with the least f. eta* > 0 (f'(0) = -2 L tr Sigma). "
        "torch: autograd gives the implicit-function derivative (one Newton step from the detached root). "
        + _GD,
))

register(ClosedForm(
    id="preconditioned_gd.multi_layer.gd_optimal_loss",
    title=f"Loss of L <= {GD_MAX_DEPTH} plain GD steps at the optimal constant step",
    source="App. D, Figs. 6-7 (GD baseline with the best step) [derived]",
    status="exact",
    params=(GD_SIGMA, N_CTX, GD_LAYERS),
    derive=derive_gd_optimal_loss,
    evaluate=_eval_gd_optimal_loss,
    example={"Sigma": [1.0, 1.0, 0.25, 0.0625, 1.0], "n": 20, "L": 3},
    doc="preconditioned_gd.multi_layer.gd_loss at preconditioned_gd.multi_layer.gd_optimal_step. " + _GD,
))
