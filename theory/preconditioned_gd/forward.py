"""Forward-pass identities of the linear transformer in moment form (Ahn, Cheng, Daneshmand, Sra
2023, App. A.1, B.2-B.4, C.2).

The layers (eqs. 2-4, 56): ``Z_{l+1} = Z_l + (1/n) P_l Z_l M Z_l^T Q_l Z_l`` with the mask
``M = diag(1, .., 1, 0)``, tokens as columns (eq. 1), the query label slot 0 and the prediction
``TF_L = -[Z_L]_{d+1,n+1}``. The mask makes every layer see the context only through
``Z_l M Z_l^T``, so with noiseless labels ``y^(i) = w*^T x^(i)`` each identity of the appendices
is a polynomial in the context covariance ``S = (1/n) sum_{i<=n} x^(i) x^(i)T``, the task ``w*``
and the query ``x_q``; this module derives those polynomials.

How they are derived (sympy, not retyped). The token matrix is written in blocks, ``d`` covariate
rows and the label row by ``n`` context columns (a ``D x n`` ``MatrixSymbol`` ``X_c``, ``n``
symbolic) and the query column; one layer is evaluated by block multiplication
(:func:`block_layer`), every product ``X_c X_c^T`` is replaced by ``n S`` (:func:`to_moments`),
and the coefficient matrices are read off and verified on both column blocks. Thus:

* eq. 13 (``single_layer_output``): one layer with *full* ``P, Q`` outputs ``b^T G A [x_q; 0]``
  with ``b^T`` the last row of ``P``, ``A`` the first ``d`` columns of ``Q`` and
  ``G = (1/n) sum z z^T = [[S, S w], [w^T S, w^T S w]]``; the other blocks of ``P, Q`` drop out of
  the derivation (eq. 14: asserted there, not assumed);
* eqs. 14-15 (``reduced_loss``): ``f(b, A) = E([Z_1]_{d+1,n+1} + y_q)^2`` for every ``b, A`` under
  Theorem 1's data model, each Gaussian moment by the Isserlis engine (:mod:`theory.gaussian`);
* eqs. 34, 57 and Lemmas 5-6 (``residual_operator``, ``covariance_step``): under eq. 11
  (``P_l = [[B_l, 0], [0, 1]]``, ``Q_l = [[A_l, 0], [0, 0]]``), with the true query label put in
  (``Zbar_0``, Lemma 5), one layer maps ``X_l = T_l X_0``, ``Ybar_l = u_l^T X_0`` to
  ``T_{l+1} = (I + B_l T_l S T_l^T A_l) T_l`` and ``u_{l+1} = (I + T_l^T A_l^T T_l S) u_l``
  (:func:`layer_step`), from ``T_0 = I``, ``u_0 = w*``. The context covariance after layer ``l``
  is ``S_{l+1} = (I + B_l S_l A_l) S_l (I + B_l S_l A_l)^T``, and the query entry of the label row
  is ``[Ybar_L]_{n+1} = x_q^T R w*``: by Lemma 6 (the query label enters additively; the other
  entries never read it) this is ``y_q - TF_L``, and by Lemma 5 the loss is its mean square.
  Eq. 25 (the sparse form: ``B_l = 0``, so ``X_l = X_0``) gives ``R = (I + A_{L-1}^T S) ...
  (I + A_0^T S)``; in eq. 8's sign (``Q_l = -[[A_l, 0], [0, 0]]``) this is ``prod (I - A_l^T S)``,
  preconditioned GD with ``A_l^T`` (Lemma 1). Lemma 4: for ``A_l = a_l Sigma^{-1}`` the factors
  commute, so ``R`` is symmetric in the ``a_l``.

Every identity is exact per prompt and independent of the data distribution except
``reduced_loss`` (an expectation). The ``1/n`` of eq. 4 is kept: B.2-B.3 (eqs. 25, 34) absorb it
into ``A_l``, so their ``A_l`` is the ``A_l`` here divided by ``n``.

Contains
--------
``preconditioned_gd.forward.single_layer_output`` (eq. 13), ``.reduced_loss`` (eqs. 14-15),
``.residual_operator`` (Lemmas 5-6, eqs. 25, 34, 57), ``.covariance_step`` (eqs. 34, 57).

References
----------
.. [1] K. Ahn, X. Cheng, H. Daneshmand, S. Sra, "Transformers learn to implement
   preconditioned gradient descent for in-context learning", NeurIPS 2023, App. A.1 (eqs. 13-15),
   B.2-B.4 (eqs. 25, 34, Lemma 4) and C.2 (eqs. 56-58, Lemmas 5-6).
"""

from __future__ import annotations

from functools import cache

from ..params import covariance, index, matrix, real, vector
from ..registry import ClosedForm, register

__all__ = ["MAX_LAYERS", "block_layer", "to_moments", "layer_step", "derive_single_layer_output",
           "printed_single_layer_output", "derive_reduced_loss", "derive_residual_operator",
           "derive_covariance_step"]

#: Layers of :func:`derive_residual_operator` (fewer by zero matrices: ``A_l = 0`` is an identity layer).
MAX_LAYERS = 3

S_CTX = matrix("S", "Context covariance S = (1/n) sum_{i<=n} x^(i) x^(i)T of the prompt (symmetric; "
                    "the formula is evaluated as written for any matrix).")
W_TASK = vector("w", "Task vector w* of the prompt (context labels y^(i) = w*^T x^(i)).")
X_QUERY = vector("x_q", "Query covariate x_q = x^(n+1) (its label slot in Z_0 is 0, eq. 1).")
B_X = vector("b_x", "First d entries of b, the last row of P (eq. 14: P = [0; b^T], b = [b_x; b_y]).")
B_Y = real("b_y", "Last entry of b, the label-label entry [P]_{d+1,d+1}.", sample=(-2.0, 2.0))
A_X = matrix("A_x", "First d rows of A, the first d columns of Q (eq. 14: Q = [A 0], A = [A_x; a_y^T]).")
A_Y = vector("a_y", "Last row of A: the label row [Q]_{d+1,1:d}.")
SIGMA = covariance("Sigma", "Covariance of the covariates x ~ N(0, Sigma) (Theorem 1: w* ~ N(0, I)).")
N_CTX = index("n", "Context length (labelled examples; the query excluded).", low=1)
LAYER_A = tuple(matrix(f"A_{l}", f"A_{l} of layer {l} in eq. 11 (Q_{l} = [[A_{l}, 0], [0, 0]], the 1/n of eq. 4 "
                                 "kept); a zero matrix makes the layer the identity.") for l in range(MAX_LAYERS))
LAYER_B = tuple(matrix(f"B_{l}", f"B_{l} of layer {l} in eq. 11 (P_{l} = [[B_{l}, 0], [0, 1]]); zero for the "
                                 "sparse form (eq. 8 / eq. 25).") for l in range(MAX_LAYERS - 1))
A_ONE = matrix("A", "A of the layer in eq. 11 (Q = [[A, 0], [0, 0]], the 1/n of eq. 4 kept).")
B_ONE = matrix("B", "B of the layer in eq. 11 (P = [[B, 0], [0, 1]]).")


def _sym(name):
    from . import sym

    return sym(name)


# -- block algebra of one layer ---------------------------------------------------------------
@cache
def _context():
    """The symbolic context block ``X_c`` (D x n) and the context length ``n``."""
    import sympy as sp

    from ..symbols import dim

    n = _sym("n")
    return sp.MatrixSymbol("X_c", dim(), n), n


def _mask():
    """``M = diag(I_n, 0)`` as a 2 x 2 block matrix (context, query)."""
    import sympy as sp

    _, n = _context()
    return sp.BlockMatrix([[sp.Identity(n), sp.ZeroMatrix(n, 1)], [sp.ZeroMatrix(1, n), sp.ZeroMatrix(1, 1)]])


def block_layer(Z, P, Q):
    """One layer of eq. 56, ``Z + (1/n) P Z M Z^T Q Z``, on 2 x 2 block matrices (covariate rows /
    label row by context columns / query column), collapsed to a 2 x 2 block matrix."""
    import sympy as sp

    _, n = _context()
    return sp.block_collapse(Z + P * Z * _mask() * Z.T * Q * Z / n)


def to_moments(expr):
    """``expr`` expanded, with every product ``X_c X_c^T`` replaced by ``n S`` (the context
    covariance); ``ValueError`` if ``X_c`` is left over (the expression is then not a function of
    the context's second moment)."""
    import sympy as sp

    Xc, n = _context()
    S = _sym("S")

    def rewrite(m):
        args, out, i = list(m.args), [], 0
        while i < len(args):
            if i + 1 < len(args) and args[i] == Xc and args[i + 1] == Xc.T:
                out += [n, S]
                i += 2
            else:
                out.append(args[i])
                i += 1
        return sp.MatMul(*out)

    return sp.expand(expr).replace(lambda x: isinstance(x, sp.MatMul), rewrite)


def _coefficient(expr, right):
    """The matrix ``C`` with ``expr = C right``: ``right`` stands last in every term of ``expr``
    (checked) and is replaced by the identity."""
    import sympy as sp

    terms = expr.args if isinstance(expr, sp.MatAdd) else (expr,)
    for t in terms:
        factors = t.args if isinstance(t, sp.MatMul) else (t,)
        if factors[-1] != right:
            raise ValueError(f"expr: the term {t} does not end on {right}")
    return sp.MatAdd(*[(t.func(*t.args[:-1]) if isinstance(t, sp.MatMul) and len(t.args) > 2 else
                        t.args[0] if isinstance(t, sp.MatMul) else sp.Identity(right.shape[0]))
                       for t in terms]).doit()


def _is_zero_matrix(expr) -> bool:
    import sympy as sp

    e = sp.expand(expr).doit()
    return e == 0 or isinstance(e, sp.ZeroMatrix)


@cache
def layer_step():
    """One layer of eq. 11 on ``X_l = T X_0``, ``Ybar_l = u^T X_0`` (true query label in, Lemma 5).

    Returns ``(T', F, symbols)`` with ``X_{l+1} = T' X_0`` and ``Ybar_{l+1} = (F u)^T X_0``, read
    off the query column of the block product (the coefficients of ``x_q``) and verified on the
    context block: ``T' = T + B T S T^T A T``, ``F = I + T^T A^T T S`` (``S^T = S``). ``symbols``
    holds the generic ``T, u, A, B``.
    """
    import sympy as sp

    from ..symbols import dim

    D = dim()
    Xc, n = _context()
    T, u = sp.MatrixSymbol("T", D, D), sp.MatrixSymbol("u", D, 1)
    A, B = sp.MatrixSymbol("A_l", D, D), sp.MatrixSymbol("B_l", D, D)
    xq = _sym("x_q")
    Z = sp.BlockMatrix([[T * Xc, T * xq], [u.T * Xc, u.T * xq]])
    P = sp.BlockMatrix([[B, sp.ZeroMatrix(D, 1)], [sp.ZeroMatrix(1, D), sp.Identity(1)]])
    Q = sp.BlockMatrix([[A, sp.ZeroMatrix(D, 1)], [sp.ZeroMatrix(1, D), sp.ZeroMatrix(1, 1)]])
    Z1 = block_layer(Z, P, Q)
    blocks = {k: to_moments(Z1.blocks[k]) for k in ((0, 0), (0, 1), (1, 0), (1, 1))}
    T_next = _coefficient(blocks[0, 1], xq)
    uT_next = _coefficient(blocks[1, 1], xq)
    # the context columns follow the same maps (X_{l+1} = T' X_0, Ybar_{l+1} = u'^T X_0)
    if not (_is_zero_matrix(blocks[0, 0] - T_next * Xc) and _is_zero_matrix(blocks[1, 0] - uT_next * Xc)):
        raise ValueError("layer_step: the context block does not follow the query column's map")
    S = _sym("S")
    F = _coefficient(sp.expand(uT_next.T.doit()), u).xreplace({S.T: S})
    return T_next, F, {"T": T, "u": u, "A": A, "B": B}


# -- eq. 13: one layer, full P, Q --------------------------------------------------------------
def _single_layer_blocks():
    import sympy as sp

    from ..symbols import dim

    D = dim()
    Xc, n = _context()
    w, xq = _sym("w"), _sym("x_q")
    b_x, b_y, A_x, a_y = _sym("b_x"), _sym("b_y"), _sym("A_x"), _sym("a_y")
    Z = sp.BlockMatrix([[Xc, xq], [w.T * Xc, sp.ZeroMatrix(1, 1)]])
    return D, Xc, n, w, xq, b_x, b_y, A_x, a_y, Z


@cache
def irrelevant_blocks():
    """The blocks of a full ``P, Q`` that eq. 14 drops: the first ``d`` rows of ``P``
    (``P_xx``, ``p_xy``) and the last column of ``Q`` (``q_x``, ``q_y``)."""
    import sympy as sp

    from ..symbols import dim

    D = dim()
    return {"P_xx": sp.MatrixSymbol("P_xx", D, D), "p_xy": sp.MatrixSymbol("p_xy", D, 1),
            "q_x": sp.MatrixSymbol("q_x", D, 1), "q_y": sp.Symbol("q_y", real=True)}


def derive_single_layer_output():
    """``[Z_1]_{d+1,n+1}`` of one layer with full ``P = [[P_xx, p_xy], [b_x^T, b_y]]`` and
    ``Q = [[A_x, q_x], [a_y^T, q_y]]`` (eq. 56 by block multiplication), in moment form. The
    blocks of :func:`irrelevant_blocks` must drop out (eq. 14); ``ValueError`` otherwise."""
    import sympy as sp

    D, Xc, n, w, xq, b_x, b_y, A_x, a_y, Z = _single_layer_blocks()
    irr = irrelevant_blocks()
    P = sp.BlockMatrix([[irr["P_xx"], irr["p_xy"]], [b_x.T, b_y * sp.Identity(1)]])
    Q = sp.BlockMatrix([[A_x, irr["q_x"]], [a_y.T, irr["q_y"] * sp.Identity(1)]])
    out = to_moments(block_layer(Z, P, Q).blocks[1, 1])
    left = [s for s in irr.values() if out.has(s)]
    if left:
        raise ValueError(f"eq. 14: the output depends on {left}")
    return sp.Trace(out).doit() if not isinstance(out, sp.Trace) else out


def printed_single_layer_output():
    """Eq. 13 as printed: ``(1/n) b^T (sum_{i<=n} z^(i) z^(i)T) A [x_q; 0]`` with ``b = [b_x; b_y]``,
    ``A = [A_x; a_y^T]`` and ``z^(i) = [x^(i); w*^T x^(i)]``, in moment form."""
    import sympy as sp

    D, Xc, n, w, xq, b_x, b_y, A_x, a_y, Z = _single_layer_blocks()
    b = sp.BlockMatrix([[b_x], [b_y * sp.Identity(1)]])
    A = sp.BlockMatrix([[A_x], [a_y.T]])
    Zc = sp.BlockMatrix([[Xc], [w.T * Xc]])
    out = sp.block_collapse(b.T * Zc * Zc.T * A * xq / n)
    return sp.Trace(to_moments(out)).doit()


# -- eqs. 14-15: the loss of any (b, A) ----------------------------------------------------------
@cache
def derive_reduced_loss():
    """``f(b, A) = E([Z_1]_{d+1,n+1} + y_q)^2`` for x ~ N(0, Sigma), w* ~ N(0, I) (Theorem 1).

    With ``h = S w``, ``(1/n) sum y_i^2 = w^T S w`` the output is ``T_0 + T_1 + T_2 + T_3`` with
    ``T_0 = b_x^T S A_x x_q``, ``T_1 = (b_x^T S w)(a_y^T x_q)``, ``T_2 = b_y w^T S A_x x_q``,
    ``T_3 = b_y (w^T S w)(a_y^T x_q)``; ``T_0, T_3`` are even in ``w``, ``T_1, T_2, y_q`` odd, so
    ``f = E(T_0 + T_3)^2 + E(T_1 + T_2 + y_q)^2``. Each moment is an engine word between the
    constant vectors (``u^T E[...] v``)."""
    import sympy as sp

    from ..gaussian import Gaussian, SampleCovariance, expectation
    from ..symbols import dim

    D, Sig, n = dim(), _sym("Sigma"), _sym("n")
    b_x, b_y, A_x, a_y = _sym("b_x"), _sym("b_y"), _sym("A_x"), _sym("a_y")
    x, x_q, w = Gaussian("x", Sig), Gaussian("x_q", Sig), Gaussian("w", sp.Identity(D))
    S = SampleCovariance(x, n)

    def q(u, M, v):
        return sp.Trace(sp.MatMul(u.T, M, v))

    aa = sp.MatMul(a_y, a_y.T)
    even = (q(b_x, expectation(S, A_x, x_q.col, x_q.row, A_x.T, S), b_x)                       # T0 T0
            + 2 * b_y * q(b_x, expectation(S, A_x, x_q.col, w.row, S, w.col, x_q.row), a_y)    # T0 T3
            + b_y**2 * q(a_y, expectation(x_q.col, w.row, S, w.col, w.row, S, w.col, x_q.row), a_y))
    odd = (q(b_x, expectation(S, w.col, x_q.row, aa, x_q.col, w.row, S), b_x)                  # T1 T1
           + b_y**2 * expectation(w.row, S, A_x, x_q.col, x_q.row, A_x.T, S, w.col)            # T2 T2
           + expectation(w.row, x_q.col, x_q.row, w.col)                                       # y y
           + 2 * b_y * q(b_x, expectation(S, w.col, w.row, S, A_x, x_q.col, x_q.row), a_y)     # T1 T2
           + 2 * q(b_x, expectation(S, w.col, w.row, x_q.col, x_q.row), a_y)                   # T1 y
           + 2 * b_y * expectation(w.row, S, A_x, x_q.col, x_q.row, w.col))                    # T2 y
    return even + odd


# -- eqs. 25, 34, 57, Lemmas 5-6: L layers of eq. 11 ----------------------------------------------
def _compose(layers):
    """``(T_L, R_L)`` after the layers ``[(A_l, B_l), ...]`` from ``T_0 = I``: ``X_L = T_L X_0`` and
    ``u_L = R_L u_0`` (the label-row factors of :func:`layer_step` multiplied, unexpanded)."""
    import sympy as sp

    from ..symbols import dim

    T_next, F, gen = layer_step()
    T = R = sp.Identity(dim())
    for A, B in layers:
        sub = {gen["T"]: T, gen["A"]: A, gen["B"]: B}
        T, R = T_next.xreplace(sub).doit(), sp.MatMul(F.xreplace(sub).doit(), R).doit()
    return T, R


@cache
def derive_residual_operator():
    """``R`` with ``[Ybar_L]_{n+1} = x_q^T R w*`` for ``L = 3`` layers of eq. 11: the label row
    starts at ``u_0 = w*`` (``Ybar_0 = w*^T X_0``) and :func:`layer_step` multiplies ``u`` by one
    factor per layer. ``B_2`` does not enter (footnote 4): the last layer is built with ``B = 0``."""
    import sympy as sp

    S = _sym("S")
    layers = [(_sym(f"A_{l}"), _sym(f"B_{l}") if l < MAX_LAYERS - 1 else sp.ZeroMatrix(*S.shape))
              for l in range(MAX_LAYERS)]
    _, R = _compose(layers)
    return R.xreplace({S.T: S})


@cache
def derive_covariance_step():
    """``S_1 = (1/n) X_1 M X_1^T`` after one layer of eq. 11 from ``S_0 = S``: with
    ``X_1 = T_1 X_0`` (:func:`layer_step`, ``T_0 = I``), ``S_1 = T_1 S T_1^T``."""
    import sympy as sp

    S = _sym("S")
    T1, _ = _compose([(_sym("A"), _sym("B"))])
    return sp.MatMul(T1, S, T1.T).doit().xreplace({S.T: S})


# -- records ------------------------------------------------------------------------------------
register(ClosedForm(
    id="preconditioned_gd.forward.single_layer_output",
    title="One layer's output entry [Z_1]_{d+1,n+1} for any P, Q, per prompt, in moment form",
    source="App. A.1, eqs. 13-14 [moment form derived]",
    status="exact",
    params=(S_CTX, W_TASK, X_QUERY, B_X, B_Y, A_X, A_Y),
    derive=derive_single_layer_output,
    printed=printed_single_layer_output,
    doc="b^T G A x_q with G = (1/n) sum_{i<=n} z^(i) z^(i)T = [[S, S w*], [w*^T S, w*^T S w*]] "
        "(noiseless labels), b^T the last row of P and A the first d columns of Q: "
        "b_x^T S A_x x_q + (b_x^T S w*)(a_y^T x_q) + b_y w*^T S A_x x_q + b_y (w*^T S w*)(a_y^T x_q). "
        "Derived from eq. 56 with full P, Q; the first d rows of P and the last column of Q drop out "
        "(eq. 14: the query's label slot is 0 and only the label row is read). The prediction is "
        "TF_1 = -(this). Exact per prompt, for any data.",
))

register(ClosedForm(
    id="preconditioned_gd.forward.reduced_loss",
    title="f(b, A): the single-layer in-context loss of any P, Q (Theorem 1's data model)",
    source="App. A.1, eqs. 14-15 (any b, A; closed form [derived])",
    status="exact",
    params=(SIGMA, N_CTX, B_X, B_Y, A_X, A_Y),
    derive=derive_reduced_loss,
    doc="x ~ N(0, Sigma), w* ~ N(0, I), noiseless; f(b, A) = E(b^T G A x_q + y_q)^2 (eq. 15; eq. 5's "
        "loss with its sign slip corrected) as a polynomial in b = [b_x; b_y] (last row of P) and "
        "A = [A_x; a_y^T] (first d columns of Q): by eq. 14 this is the loss of every single-layer "
        "(P, Q). b = e_{d+1}, A_x = -A, a_y = 0 gives preconditioned_gd.single_layer.loss(A); "
        "Theorem 1's minimum is b_y A_x = -Gamma*, b_x = 0, a_y = 0. Terms quartic in w* (the "
        "label-label entries b_y and a_y) make it heavy-tailed in Monte Carlo.",
))

register(ClosedForm(
    id="preconditioned_gd.forward.residual_operator",
    title="R with y_q - TF_L = [Ybar_L]_{n+1} = x_q^T R w*, for L <= 3 layers of eq. 11, per prompt",
    source="Lemmas 5-6, eqs. 25, 34, 57 (App. B.2-B.3, C.2) [moment form derived]",
    status="exact",
    params=(S_CTX, *LAYER_A, *LAYER_B),
    derive=derive_residual_operator,
    output="matrix",
    # three sparse GD steps of size 1/2 (eq.-11 sign): R = (I - S/2)^3
    example={"S": [[1.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 0.25]],
             **{f"A_{l}": [[-0.5, 0.0, 0.0], [0.0, -0.5, 0.0], [0.0, 0.0, -0.5]] for l in range(MAX_LAYERS)},
             **{f"B_{l}": [[0.0] * 3] * 3 for l in range(MAX_LAYERS - 1)}},
    doc="R = (I + K_2^T S)(I + K_1^T S)(I + K_0^T S), K_l = T_l^T A_l T_l, T_0 = I, "
        "T_{l+1} = (I + B_l T_l S T_l^T A_l) T_l (X_l = T_l X_0, eq. 34/57 with the 1/n kept). "
        "Lemma 6: the query label enters [Y_l]_{n+1} additively and nothing else, so y_q - TF_L is "
        "the query entry of the label row run from Zbar_0 (true label in); Lemma 5: the loss is "
        "E (x_q^T R w*)^2 = E tr(Sigma R Cov(w*) R^T). Zero A_l (and B_l) give fewer layers; "
        "B_l = 0 is the sparse form (eq. 25): R = prod (I + A_l^T S), in eq. 8's sign prod (I - A_l^T "
        "S), L steps of GD preconditioned with A_l^T (Lemma 1). On A_l = a_l Sigma^{-1} the factors "
        "commute (Lemma 4). B_2 never enters (footnote 4). Exact per prompt, for any data.",
))

register(ClosedForm(
    id="preconditioned_gd.forward.covariance_step",
    title="Context covariance after one eq.-11 layer: S' = (I + B S A) S (I + B S A)^T, per prompt",
    source="eqs. 34, 57 (covariate rows; App. B.3, C.2) [moment form derived]",
    status="exact",
    params=(S_CTX, A_ONE, B_ONE),
    derive=derive_covariance_step,
    output="matrix",
    # a GD++ layer with a b = -1/4 on a diagonal S: S (I - S/4)^2
    example={"S": [[1.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 0.25]],
             "A": [[-0.5, 0.0, 0.0], [0.0, -0.5, 0.0], [0.0, 0.0, -0.5]],
             "B": [[0.5, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 0.5]]},
    doc="X_{l+1} = X_l + (1/n) B_l X_l M X_l^T A_l X_l = (I + B_l S_l A_l) X_l, so the covariance of "
        "the context columns S_l = (1/n) X_l M X_l^T obeys S_{l+1} = (I + B_l S_l A_l) S_l (I + B_l S_l "
        "A_l)^T; iterate layer by layer. On Theorem 4's set (A = a Sigma^{-1}, B = b I) and in "
        "whitened coordinates S = W S_u W^T (Sigma = W W^T): S_u -> S_u (I + a b S_u)^2, the GD++ "
        "curvature correction of Sec. 5.1 (a b < 0). The sparse form (B = 0) leaves S unchanged "
        "(eq. 25: X_l = X_0).",
))
