"""L-layer linear transformers on the critical set of Theorem 3 (Ahn, Cheng, Daneshmand, Sra 2023).

Setting (§4.2, Theorem 3): covariates ``x ~ N(0, Sigma)``, task ``w* ~ N(0, Sigma^{-1})``,
noiseless labels, ``n`` context examples, the sparse layers of eq. 8
``P_l = E_{d+1,d+1}``, ``Q_l = -[[A_l, 0], [0, 0]]`` with step sizes ``a_l`` in the eq.-8
convention (the ``1/n`` of the attention included), loss ``f = E (TF_L - y_q)^2`` (no 1/2;
the "+" of eq. 5 is a sign typo). By Lemma 1 (with ``A_l^T``, equal to ``A_l`` here) the
transformer runs preconditioned GD ``w_{l+1} = w_l - A_l S (w_l - w*)``, ``TF_L = <x_q, w_L>``.

What is derived here (not retyped):

* the Wishart trace moments ``m_k = E tr S_u^k`` (``S_u`` the covariance of ``n`` white
  samples) by Wick pairings (:mod:`theory.preconditioned_gd.wishart`);
* the exact loss on ``S = {A_l = a_l Sigma^{-1}}``: whitening ``x = W u``, ``w* = W^{-T} v``
  (``Sigma = W W^T``) gives ``TF_L - y_q = -u_q^T prod_l (I - a_l S_u) v``, so with
  ``E[v v^T] = E[u_q u_q^T] = I``, ``f(a) = E tr prod_l (I - a_l S_u)^2`` (the factors commute),
  ``= sum_{j,k} c_j c_k m_{j+k}`` with ``prod_l (1 - a_l s) = sum_k c_k s^k`` (whitening,
  App. B.2). Sigma drops out;
* the optimal steps: ``f`` is ``int p^2 dmu`` over polynomials ``p(0) = 1`` of degree ``L``
  (``mu`` the expected spectral measure of ``S_u``), minimised by the kernel polynomial
  ``c_{1..L} = -H^{-1} g``, ``H_{jk} = m_{j+k}``, ``g_k = m_k``; ``a_l = 1 / root_l(p)`` and
  ``f*_L = d - g^T H^{-1} g``;
* the gradient on ``S``: ``grad_{A_l} f = g_l Sigma`` (Theorem 3's proof, B.2: the rotation
  average of the gradient), hence ``df/da_l = <grad_{A_l} f, Sigma^{-1}> = d g_l``;
* Theorem 2 (two layers, ``Sigma = I``, symmetric ``A_l``): the optimum is scalar
  ``A_l = a_l I``, the ``L = 2`` case of the above with ``a_0 + a_1 = -c_1``, ``a_0 a_1 = c_2``.

Contains
--------
``preconditioned_gd.multi_layer.loss``, ``.optimal_steps``, ``.optimal_loss``,
``.gradient_scales``. The moments are :mod:`theory.preconditioned_gd.wishart`, Theorem 2's two-layer optimum
:mod:`theory.preconditioned_gd.two_layer`, Theorem 4's GD++ loss :mod:`theory.preconditioned_gd.gdpp`.

References
----------
.. [1] K. Ahn, X. Cheng, H. Daneshmand, S. Sra, "Transformers learn to implement
   preconditioned gradient descent for in-context learning", NeurIPS 2023,
   Theorems 2 and 3, Lemmas 1 and 4, App. B.1-B.2.
"""

from __future__ import annotations

from functools import cache

from ..params import index, steps
from ..registry import ClosedForm, register
from .wishart import D_DIM, N_CTX, moments, trace_moment

__all__ = ["MAX_LAYERS", "moments", "kernel_coefficients", "spectral_loss", "derive_loss",
           "optimal_kernel", "derive_optimal_loss_of", "optimal_steps_of", "stable_optimal_steps_of",
           "derive_optimal_steps", "stable_optimal_steps",
           "derive_optimal_loss", "derive_gradient_scales"]

#: Largest number of layers with closed forms here (the loss needs m_1..m_{2L}).
MAX_LAYERS = 3

LAYERS = index("L", "Number of layers.", low=1, high=MAX_LAYERS, sample=(1, 9))
STEPS = steps("a", "Step sizes a_0, ..., a_{L-1} of the layers (A_l = a_l Sigma^{-1}, eq.-8 convention "
                   "including the 1/n); one entry per layer.", high=MAX_LAYERS)


def _sym(name):
    from . import sym

    return sym(name)


def _padded_steps(values, dims, backend="numpy"):
    a = tuple(values["a"]) + (0.0,) * (MAX_LAYERS - len(values["a"]))
    return {f"a_{l}": a[l] for l in range(MAX_LAYERS)}


# -- moments and the loss ---------------------------------------------------------------
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


def derive_loss():
    """``f(a_0, a_1, a_2) = E tr prod_l (I - a_l S_u)^2``: the L = 3 polynomial; a zero step is
    an identity layer, so it is the L-layer loss for the first L steps padded with zeros."""
    a = [_sym(f"a_{l}") for l in range(MAX_LAYERS)]
    return spectral_loss(kernel_coefficients(a), moments(2 * MAX_LAYERS))


def stable_loss():
    """The loss expanded around ``S_u = I``: ``sum_{j,k} b_j b_k mu_{j+k}`` with
    ``prod_l (1 - a_l (1 + e)) = sum_k b_k e^k`` and the central moments
    ``mu_k = E tr (S_u - I)^k`` (cancelled exactly in sympy; ``mu_k = O(n^{-k/2})`` for even k).

    The raw-moment form sums terms of size ~d to a loss that can be ~1e-3 (large n near the
    optimum), losing ~4 digits in float64; this form keeps the small quantities separate.
    Equal to :func:`derive_loss` (proved by the symbolic check)."""
    import sympy as sp

    a = [_sym(f"a_{l}") for l in range(MAX_LAYERS)]
    m = moments(2 * MAX_LAYERS)
    e = sp.Dummy("e")
    poly = sp.Poly(sp.Mul(*[1 - al * (1 + e) for al in a]), e)
    b = [poly.coeff_monomial(e**k) for k in range(MAX_LAYERS + 1)]
    mu = [sp.factor(sp.cancel(sp.Add(*[sp.binomial(k, i) * (-1) ** (k - i) * m[i] for i in range(k + 1)])))
          for k in range(2 * MAX_LAYERS + 1)]
    return sp.Add(*[b[j] * b[k] * mu[j + k] for j in range(len(b)) for k in range(len(b))])


def derive_gradient_scales():
    """``g_l = (df/da_l) / d``: the scalar with ``grad_{A_l} f = g_l Sigma`` on the set S."""
    import sympy as sp

    f, d = derive_loss(), _sym("d")
    return sp.ImmutableMatrix([sp.expand(sp.diff(f, _sym(f"a_{l}"))) / d for l in range(MAX_LAYERS)])


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
    raise ValueError(f"L: must be <= {MAX_LAYERS}, got {L}")


def _by_layers(values_per_L):
    """``Piecewise`` over ``L = 1..MAX_LAYERS`` (the last one as the default branch)."""
    import sympy as sp

    L = _sym("L")
    branches = [(v, sp.Eq(L, k + 1)) for k, v in enumerate(values_per_L[:-1])]
    return sp.Piecewise(*branches, (values_per_L[-1], True))


def _steps_vector(steps_of):
    import sympy as sp

    per_L = [steps_of(L) for L in range(1, MAX_LAYERS + 1)]
    return sp.ImmutableMatrix([_by_layers([s[l] if l < len(s) else sp.S.Zero for s in per_L])
                               for l in range(MAX_LAYERS)])


def derive_optimal_steps():
    """3-vector: entry ``l`` is the ``l``-th smallest optimal step for ``L > l`` (0 padding)."""
    return _steps_vector(optimal_steps_of)


def stable_optimal_steps():
    """:func:`derive_optimal_steps` for numerics: the L = 3 polynomials evaluated in the ratios
    n/z, d/z, 1/z (z = n + d + 1), which do not overflow; equal to it once unwrapped."""
    return _steps_vector(stable_optimal_steps_of)


def derive_optimal_loss():
    return _by_layers([derive_optimal_loss_of(L) for L in range(1, MAX_LAYERS + 1)])


# -- records ------------------------------------------------------------------------------
register(ClosedForm(
    id="preconditioned_gd.multi_layer.loss",
    title="Loss of L <= 3 sparse layers on the set A_l = a_l Sigma^{-1}",
    source="Theorem 3, eq. 8 and App. B.2 [loss derived]",
    status="exact",
    params=(N_CTX, D_DIM, STEPS),
    derive=derive_loss,
    stable=stable_loss,
    derived=_padded_steps,
    derived_names=tuple(f"a_{l}" for l in range(MAX_LAYERS)),
    doc="x ~ N(0, Sigma), w* ~ N(0, Sigma^{-1}), noiseless; f = E (TF_L - y_q)^2 with "
        "TF_L = <x_q, w_L> after L preconditioned-GD steps with A_l = a_l Sigma^{-1}. "
        "f(a) = E tr prod_l (I - a_l S_u)^2 = sum_{j,k} c_j c_k m_{j+k}, independent of Sigma. "
        "The expression is the L = 3 polynomial in (a_0, a_1, a_2); a layer with a_l = 0 is the "
        "identity, so padding the L given steps with zeros gives the L-layer loss. Symmetric in "
        "the a_l (Lemma 4: the layers commute on S).",
))

register(ClosedForm(
    id="preconditioned_gd.multi_layer.optimal_steps",
    title="Optimal step sizes on S (ascending), L = 1..3",
    source="Theorem 3 [values derived: kernel polynomial]",
    status="exact",
    params=(N_CTX, D_DIM, LAYERS),
    derive=derive_optimal_steps,
    stable=stable_optimal_steps,
    output="vector",
    length=lambda values, dims: values["L"],
    doc="The minimiser of f over S: a_l = 1/root_l of the kernel polynomial p(s) = 1 + sum c_k s^k, "
        "c = -H^{-1} g (H_{jk} = m_{j+k}, g_k = m_k). L = 1: n/(n+d+1); L = 2: quadratic formula; "
        "L = 3: trigonometric (Viete) roots of the cubic. Any order of them is optimal (Lemma 4). "
        "The expression is a padded 3-vector of Piecewise-in-L entries; L entries are returned.",
))

register(ClosedForm(
    id="preconditioned_gd.multi_layer.optimal_loss",
    title="Optimal loss on S, f*_L = d - g^T H^{-1} g, L = 1..3",
    source="Theorem 3 [value derived]",
    status="exact",
    params=(N_CTX, D_DIM, LAYERS),
    derive=derive_optimal_loss,
    doc="L = 1: d(d+1)/(n+d+1) (the single-layer optimum under w* ~ N(0, Sigma^{-1})). "
        "n = 20, d = 5: 15/13, 1795/4969, 12138645/90852389.",
))

register(ClosedForm(
    id="preconditioned_gd.multi_layer.gradient_scales",
    title="Gradient on S: grad_{A_l} f = g_l Sigma, the scalars g_0..g_{L-1}",
    source="Theorem 3 and App. B.2 [g_l derived]",
    status="exact",
    params=(N_CTX, D_DIM, STEPS),
    derive=derive_gradient_scales,
    output="vector",
    derived=_padded_steps,
    derived_names=tuple(f"a_{l}" for l in range(MAX_LAYERS)),
    length=lambda values, dims: len(values["a"]),
    doc="Frobenius gradient with respect to the full d x d matrix A_l at A = (a_l Sigma^{-1}). "
        "B.2's rotation argument makes it proportional to Sigma; pairing with the direction "
        "Sigma^{-1} of S gives df/da_l = tr(g_l Sigma Sigma^{-1}) = d g_l. Zero at the optimal steps "
        "(the critical points of Theorem 3).",
))
