"""The Isserlis (Wick) expectation engine, theory.gaussian, against independent computations:
combinatorial counts, an explicit 3 x 3 whitening computation with sympy.stats moments, a hand
formula and a Monte Carlo z-test for a sixth moment, and a hand formula for E[Lambda_hat A Lambda_hat].
"""

import itertools
from functools import reduce
from math import comb

import numpy as np
import pytest
import sympy as sp

from theory.compare import equal
from theory.gaussian import (Gaussian, SampleCovariance, expectation, expectation_kron, perfect_matchings,
                             set_partitions)
from theory.linear_attention import sym
from theory.symbols import dim
from verify.stats import batch_mean, z_threshold

D = dim()
LAM, A, N = sym("Lambda"), sym("A"), sym("N")
B = sp.MatrixSymbol("B", D, D)
x = Gaussian("x", LAM)
w = Gaussian("w", sp.Identity(D))
LHAT = SampleCovariance(x, N)

#: A lower-triangular whitening factor with small rational entries: Lambda = L L^T at D = 3.
L3 = sp.Matrix([[1, 0, 0], [sp.Rational(1, 2), 1, 0], [sp.Rational(-1, 3), sp.Rational(1, 4), sp.Rational(3, 2)]])
LAM3 = L3 * L3.T


def bell(n):
    b = [1]
    for k in range(n):
        b.append(sum(comb(k, j) * b[j] for j in range(k + 1)))
    return b[n]


def at_d3(expr, values):
    """``expr`` at D = 3 with the named D x D matrix symbols replaced by explicit matrices."""
    e = expr.subs(D, 3).xreplace({sp.MatrixSymbol(k, 3, 3): sp.ImmutableMatrix(v) for k, v in values.items()})
    e = e.replace(lambda t: isinstance(t, sp.Identity), lambda t: sp.ImmutableMatrix(sp.eye(int(t.rows))))
    for _ in range(5):
        new = e.doit()
        if new == e:
            break
        e = new
    return sp.Matrix(e) if getattr(e, "is_Matrix", False) else sp.sympify(e)


def rational_matrix(rng, lo=-4, hi=5):
    return sp.Matrix(3, 3, lambda i, j: sp.Rational(int(rng.integers(lo, hi)), int(rng.integers(1, 4))))


# -- combinatorics ------------------------------------------------------------------------
@pytest.mark.parametrize("n", range(8))
def test_set_partitions_are_bell_many_and_valid(n):
    parts = list(set_partitions(range(n)))
    assert len(parts) == bell(n)  # 1, 1, 2, 5, 15, 52, 203, 877
    canon = {frozenset(frozenset(b) for b in p) for p in parts}
    assert len(canon) == len(parts), "a partition is repeated"
    for p in parts:
        assert all(p_ for p_ in p) and sorted(i for b in p for i in b) == list(range(n))


@pytest.mark.parametrize("n", range(11))
def test_perfect_matchings_are_double_factorial_many(n):
    ms = list(perfect_matchings(range(n)))
    expected = 0 if n % 2 else reduce(lambda a, b: a * b, range(n - 1, 0, -2), 1)  # (n-1)!!
    assert len(ms) == expected
    assert len({frozenset(frozenset(p) for p in m) for m in ms}) == len(ms)
    for m in ms:
        assert sorted(i for pair in m for i in pair) == list(range(n))


# -- E[x x^T A x x^T] against whitening with sympy.stats moments ------------------------------
def _standard_normal_moments(kmax):
    from sympy.stats import E, Normal

    Z = Normal("Z", 0, 1)
    return [E(Z**k) for k in range(kmax + 1)]


def whitened_expectation(matrix_of_z, z):
    """E over independent standard normals z of a matrix polynomial in z (moment by moment)."""
    m = _standard_normal_moments(6)

    def expect(poly_expr):
        p = sp.Poly(sp.expand(poly_expr), *z)
        return sp.Add(*[c * sp.Mul(*[m[k] for k in monom]) for monom, c in p.terms()])

    return matrix_of_z.applyfunc(expect)


def test_fourth_moment_matches_whitening_3x3():
    """x = L z with z ~ N(0, I_3): E[x x^T A x x^T] for a symbolic A equals the engine's
    Lambda A Lambda + Lambda A^T Lambda + tr(A Lambda) Lambda at Lambda = L L^T."""
    z = sp.symbols("z0:3")
    Asym = sp.Matrix(3, 3, lambda i, j: sp.Symbol(f"a{i}{j}"))
    xv = L3 * sp.Matrix(z)
    truth = whitened_expectation(xv * xv.T * Asym * xv * xv.T, z)
    engine = at_d3(expectation(x.col, x.row, A, x.col, x.row), {"Lambda": LAM3, "A": Asym})
    assert (engine - truth).applyfunc(sp.expand) == sp.zeros(3, 3)
    # negative control: the pairing Lambda A^T Lambda replaced by a second Lambda A Lambda
    wrong = 2 * LAM3 * Asym * LAM3 + (Asym * LAM3).trace() * LAM3
    assert (wrong - truth).applyfunc(sp.expand) != sp.zeros(3, 3)


def test_lambda_hat_second_moment_matches_whitening_3x3():
    """E[Lambda_hat^2] at N = 2 (two explicit samples) by whitening, against the engine at N = 2."""
    z1, z2 = sp.symbols("u0:3"), sp.symbols("v0:3")
    x1, x2 = L3 * sp.Matrix(z1), L3 * sp.Matrix(z2)
    Lh = (x1 * x1.T + x2 * x2.T) / 2
    truth = whitened_expectation(Lh * Lh, z1 + z2)
    engine = at_d3(expectation(LHAT, LHAT).subs(N, 2), {"Lambda": LAM3})
    assert (engine - truth).applyfunc(sp.expand) == sp.zeros(3, 3)


# -- a sixth moment -----------------------------------------------------------------------
def _cubic_form_moment_hand(Lam, Amat):
    """E[(x^T A x)^3] = (tr S)^3 + 6 tr S tr S^2 + 8 tr S^3 with S = A_sym Lambda (x ~ N(0, Lambda))."""
    S = (Amat + Amat.T) / 2 * Lam
    t1, t2, t3 = S.trace(), (S * S).trace(), (S * S * S).trace()
    return t1**3 + 6 * t1 * t2 + 8 * t3


def test_sixth_moment_matches_hand_formula():
    rng = np.random.default_rng(6)
    Amat = rational_matrix(rng)
    engine = expectation(x.row, A, x.col, x.row, A, x.col, x.row, A, x.col)
    value = at_d3(engine, {"Lambda": LAM3, "A": Amat})
    assert sp.simplify(value - _cubic_form_moment_hand(LAM3, Amat)) == 0


def test_sixth_moment_monte_carlo():
    """Monte Carlo z-test (family of one, false-alarm 1e-6) of E[(x^T A x)^3] with 1e6 draws;
    the negative control, the hand formula with S = A Lambda not symmetrised (wrong for a
    non-symmetric A), is rejected by the same statistic (observed z: -2.7 and 74)."""
    rng = np.random.default_rng(20250611)
    Amat = rational_matrix(rng)
    Lam = np.array(LAM3.tolist(), dtype=float)
    An = np.array(Amat.tolist(), dtype=float)
    predicted = float(at_d3(expectation(x.row, A, x.col, x.row, A, x.col, x.row, A, x.col),
                            {"Lambda": LAM3, "A": Amat}))
    Lc = np.linalg.cholesky(Lam)
    acc = batch_mean()
    for _ in range(10):
        xs = rng.standard_normal((100_000, 3)) @ Lc.T
        acc.add(np.einsum("ni,ij,nj->n", xs, An, xs) ** 3)
    est = acc.result()
    zmax = z_threshold(1)
    assert abs(float(est.z(predicted))) < zmax
    S = Amat * LAM3
    t1, t2, t3 = S.trace(), (S * S).trace(), (S * S * S).trace()
    wrong = float(t1**3 + 6 * t1 * t2 + 8 * t3)
    assert abs(float(est.z(wrong))) > zmax


# -- structure ----------------------------------------------------------------------------
def test_kron_of_words_sharing_a_vector_is_refused():
    with pytest.raises(ValueError, match=r"^left, right: "):
        expectation_kron([x.col, x.row], [x.col, x.row])
    with pytest.raises(ValueError, match=r"^left, right: "):
        expectation_kron([LHAT], [x.col, x.row])
    ok = expectation_kron([w.col, w.row], [LHAT])
    assert isinstance(ok, sp.KroneckerProduct)


@pytest.mark.parametrize("word", [
    (x.col, w.row, x.col, x.row),          # x three times, w once (D x D)
    (x.row, A, x.col, x.row, w.col),       # scalar with x three times
    (LHAT, x.col, w.row),                  # Lambda_hat copies even, x and w once
    (w.row, LHAT, LHAT, x.col),            # odd in w and in x
], ids=["xxx-w", "scalar-xxx-w", "lhat-x-w", "w-lhat2-x"])
def test_odd_words_vanish(word):
    assert expectation(*word) == 0


@pytest.mark.parametrize("word", [(x.col, x.col), (x.row, x.row), (x.col, x.row, x.col)])
def test_malformed_words_are_refused(word):
    with pytest.raises(ValueError, match=r"^word: "):
        expectation(*word)


def test_quadratic_form_and_mean():
    assert equal(expectation(x.row, A, x.col), sp.Trace(A * LAM), covariance=LAM)
    assert equal(expectation(LHAT), LAM, covariance=LAM)


def test_lambda_hat_A_lambda_hat_hand_formula():
    """E[Lambda_hat A Lambda_hat] = Lambda A Lambda + (Lambda A^T Lambda + tr(A Lambda) Lambda)/N."""
    engine = expectation(LHAT, A, LHAT)
    r3 = LAM * A * LAM + (LAM * A.T * LAM + sp.Trace(A * LAM) * LAM) / N
    assert equal(engine, r3, covariance=LAM)
    wrong = LAM * A * LAM + (LAM * A * LAM + sp.Trace(A * LAM) * LAM) / N  # A for A^T
    assert not equal(engine, wrong, covariance=LAM)
    assert equal(expectation(LHAT, sp.Identity(D), LHAT), expectation(LHAT, LHAT), covariance=LAM)


def test_lambda_hat_word_does_not_depend_on_the_order_of_sample_copies():
    """E[Lambda_hat A Lambda_hat B Lambda_hat] equals the sum over set partitions of the three
    positions of N(N-1)...(N-b+1)/N^3 E[word with one independent copy per block], whatever
    copy is put in which block (every permutation of the copies gives the same result)."""
    rng = np.random.default_rng(3)
    values = {"Lambda": LAM3, "A": rational_matrix(rng), "B": rational_matrix(rng)}
    engine = at_d3(expectation(LHAT, A, LHAT, B, LHAT), values)
    copies = [Gaussian(f"c{k}", LAM) for k in range(3)]
    mats = [A, B]
    for perm in itertools.permutations(range(3)):
        total = sp.zeros(3, 3)
        for part in set_partitions(range(3)):
            block_of = {pos: perm[i] for i, block in enumerate(part) for pos in block}
            word = []
            for pos in range(3):
                c = copies[block_of[pos]]
                word += [c.col, c.row] + ([mats[pos]] if pos < 2 else [])
            weight = sp.ff(N, len(part)) / N**3
            total += weight * at_d3(expectation(*word), values)
        assert (total - engine).applyfunc(sp.cancel) == sp.zeros(3, 3), perm


def test_transposed_word_gives_transposed_expectation():
    """E[(Lambda_hat A Lambda_hat)^T] = E[Lambda_hat A^T Lambda_hat]."""
    rng = np.random.default_rng(4)
    values = {"Lambda": LAM3, "A": rational_matrix(rng)}
    a = at_d3(expectation(LHAT, A, LHAT), values)
    b = at_d3(expectation(LHAT, A.T, LHAT), values)
    assert (a.T - b).applyfunc(sp.cancel) == sp.zeros(3, 3)


def test_a_closed_scalar_word_multiplies_the_rest():
    """Closed(x^T A x) next to x x^T is the same expectation as the one word x x^T A x x^T (the scalar
    commutes), and a closed word shares its sample covariances' index partitions with the main word."""
    from theory.gaussian import Closed

    x = Gaussian("x", LAM)
    assert equal(expectation(x.col, x.row, Closed(x.row, A, x.col)), expectation(x.col, x.row, A, x.col, x.row))
    # E[Lhat (w^T Lhat w)] = E[tr(Lhat) Lhat] (w ~ N(0, I) independent) = tr(Lambda) Lambda + 2 Lambda^2 / N by
    # hand: N diagonal pairs give E[(x^T x) x x^T] = tr(Lambda) Lambda + 2 Lambda^2, N (N - 1) give tr(Lambda) Lambda
    lhs = expectation(LHAT, Closed(w.row, LHAT, w.col))
    assert equal(lhs, sp.Trace(LAM) * LAM + 2 / N * LAM * LAM)
    assert not equal(lhs, sp.Trace(LAM) * LAM + LAM * LAM / N)
    with pytest.raises(ValueError, match="Closed: the word must be a scalar"):
        expectation(x.col, x.row, Closed(A, x.col, x.row))
