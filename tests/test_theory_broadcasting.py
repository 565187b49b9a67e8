"""numpy evaluation over grids: arrays for scalar parameters broadcast (numpy's rules) and give the
value at every grid point, with the grid's shape first, for every registered record."""

from __future__ import annotations

import numpy as np
import pytest

import theory
from theory.registry import SCALAR_KINDS
from verify.symbolic import sample_params

RECORDS = [r for r in theory.records() if any(p.kind in SCALAR_KINDS for p in r.params)]


def _grid(p, value, n):
    """``n`` valid values of scalar parameter ``p`` around ``value`` (0 stays in range for a
    nonnegative or real parameter)."""
    if value == 0:
        return np.linspace(0.0, 0.2, n)
    return value * np.linspace(1.0, 1.2, n)


def _loop(cf, point, names, grids):
    """The value at every grid point by a Python loop, stacked with the grid's shape first."""
    shape = np.broadcast_shapes(*(g.shape for g in grids))
    out = [np.asarray(cf(**dict(point, **{n: float(np.broadcast_to(g, shape)[i]) for n, g in zip(names, grids)})))
           for i in np.ndindex(shape)]
    return np.stack(out).reshape(shape + out[0].shape)


@pytest.mark.parametrize("cf", RECORDS, ids=lambda cf: cf.id)
def test_each_scalar_parameter_as_an_array_equals_the_loop(cf):
    point = cf.example or sample_params(cf, np.random.default_rng(7))
    for p in [p for p in cf.params if p.kind in SCALAR_KINDS]:
        grid = _grid(p, point[p.name], 3)
        try:
            expected = _loop(cf, point, [p.name], [grid])
        except ValueError:
            continue  # the nudged values leave the parameter's domain here
        got = np.asarray(cf(**dict(point, **{p.name: grid})))
        assert got.shape == expected.shape, (p.name, got.shape, expected.shape)
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0, err_msg=p.name)


@pytest.mark.parametrize("cf", [cf for cf in RECORDS if sum(p.kind in SCALAR_KINDS for p in cf.params) >= 2],
                         ids=lambda cf: cf.id)
def test_two_scalar_parameters_broadcast_to_a_two_dimensional_grid(cf):
    point = cf.example or sample_params(cf, np.random.default_rng(11))
    a, b = [p for p in cf.params if p.kind in SCALAR_KINDS][:2]
    grids = [_grid(a, point[a.name], 3)[:, None], _grid(b, point[b.name], 2)[None, :]]
    try:
        expected = _loop(cf, point, [a.name, b.name], grids)
    except ValueError:
        pytest.skip("the nudged values leave the domain at this point")
    got = np.asarray(cf(**dict(point, **{a.name: grids[0], b.name: grids[1]})))
    assert got.shape[:2] == (3, 2) and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)


def test_a_value_independent_of_a_grid_parameter_still_has_the_grid_shape():
    # gamma's peak does not depend on eta_Y: one value per grid point all the same
    cf = theory.get("scan_snap.speed.gamma_peak")
    out = cf(M=1000, K=10, eta_Y=np.array([0.5, 1.0, 2.0]))
    assert out.shape == (3,) and np.all(out == cf(M=1000, K=10, eta_Y=1.0))


def test_grids_that_do_not_broadcast_are_refused():
    cf = theory.get("linear_attention.merged.sigma")
    with pytest.raises(ValueError, match="^(N|w_init|t|tau|D)"):
        cf(t=np.ones(3), tau=1.0, D=4, N=np.array([31, 32]), w_init=1e-3)


MATRIX_RECORDS = [r for r in theory.records() if any(p.kind in ("matrix", "covariance") for p in r.params)]


def _as_matrix(p, value):
    """A covariance given as eigenvalues becomes its diagonal matrix (a stack holds matrices)."""
    arr = np.asarray(value, dtype=float)
    return np.diag(arr) if p.kind == "covariance" and arr.ndim == 1 else arr


@pytest.mark.parametrize("cf", MATRIX_RECORDS, ids=lambda cf: cf.id)
def test_a_stack_of_matrices_equals_the_loop(cf):
    """Each matrix or covariance parameter given as a stack (S, D, D) gives the S values of the loop,
    stacked along a leading axis, from one evaluation of the emitted function on the stack."""
    point = cf.example or sample_params(cf, np.random.default_rng(5))
    for p in [p for p in cf.params if p.kind in ("matrix", "covariance")]:
        base = _as_matrix(p, point[p.name])
        # a symmetric positive nudge keeps a covariance positive definite and a matrix in its domain
        stack = np.stack([base * s for s in (1.0, 1.1, 0.9)])
        try:
            expected = np.stack([np.asarray(cf(**dict(point, **{p.name: m}))) for m in stack])
        except ValueError:
            continue  # a nudged matrix leaves the record's domain here
        got = np.asarray(cf(**dict(point, **{p.name: stack})))
        assert got.shape == expected.shape, (p.name, got.shape, expected.shape)
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0, err_msg=p.name)
        # one evaluation of the emitted code on the whole stack, not a loop over its items
        assert cf._fns.get(("stack", False)) is not False, f"{p.name}: evaluated item by item"


def test_a_stack_of_spectra_gives_the_saddle_loss_per_spectrum():
    """The README's example: eq. 19's loss at the m-th saddle for 1,000 random spectra in one call."""
    cf = theory.get("linear_attention.separate.saddle_loss")
    rng = np.random.default_rng(0)
    spectra = np.stack([np.diag(np.sort(rng.uniform(0.1, 1.0, 4))[::-1]) for _ in range(1000)])
    got = cf(Lambda=spectra, N=31, m=2)
    assert got.shape == (1000,)
    for i in (0, 499, 999):
        assert got[i] == pytest.approx(cf(Lambda=spectra[i], N=31, m=2), rel=1e-12, abs=0)


def test_stacks_refuse_what_they_cannot_do():
    cf = theory.get("linear_attention.merged.loss")
    lam, M = np.eye(3), np.zeros((4, 3, 3))
    with pytest.raises(ValueError, match=r"^M: a stack of matrices .* numpy backend"):
        cf("torch", Lambda=lam, N=15, M=M)
    with pytest.raises(ValueError, match=r"^M: a stack of 4 matrices does not match the 2 of Lambda"):
        cf(Lambda=np.stack([lam, lam]), N=15, M=M)
    with pytest.raises(ValueError, match=r"^Lambda: matrix is not positive definite \(item 1 of the stack\)"):
        cf(Lambda=np.stack([lam, -lam]), N=15, M=M[:2])
    with pytest.raises(ValueError, match=r"^Lambda: matrix is not symmetric \(item 2 of the stack\)"):
        cf(Lambda=np.stack([lam, lam, np.triu(np.ones((3, 3)))]), N=15, M=M[:3])
    with pytest.raises(ValueError, match=r"^M: contains NaN"):
        cf(Lambda=lam, N=15, M=np.full((2, 3, 3), np.nan))
    with pytest.raises(ValueError, match=r"^M: dimension 2 does not match"):
        cf(Lambda=lam, N=15, M=np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="^M: an empty stack"):
        cf(Lambda=lam, N=15, M=np.zeros((0, 3, 3)))
    with pytest.raises(ValueError, match=r"^tau: arrays of scalar parameters and stacks of matrices \(Lambda\)"):
        theory.get("linear_attention.merged.plateau_time")(Lambda=np.stack([lam, lam]), tau=[1.0, 2.0], w_init=0.01)


# -- ClosedForm.of: one scalar parameter varied, the others validated once ----------------------------------
@pytest.mark.parametrize("cf", RECORDS, ids=lambda cf: cf.id)
def test_of_one_scalar_parameter_equals_the_full_calls(cf):
    point = cf.example or sample_params(cf, np.random.default_rng(13))
    for p in [p for p in cf.params if p.kind in SCALAR_KINDS]:
        others = {n: v for n, v in point.items() if n != p.name}
        xs = [float(x) for x in _grid(p, point[p.name], 4)]
        try:
            expected = [np.asarray(cf(**others, **{p.name: x})) for x in xs]
        except ValueError:
            continue  # the nudged values leave the parameter's domain here
        f = cf.of(p.name, **others)
        for x, want in zip(xs, expected):
            got = np.asarray(f(x))
            assert got.shape == want.shape, (p.name, got.shape, want.shape)
            np.testing.assert_array_equal(got, want, err_msg=f"{p.name} = {x}")  # the same arithmetic


def test_of_the_printed_form_and_an_array_equal_the_full_calls():
    cf = theory.get("linear_attention.separate.scalar_ode_integrand")
    fixed = dict(lam=0.3, a=0.5, tau=1.0)
    f = cf.of("v", printed=True, **fixed)
    for v in (0.01, 0.2, 0.5):
        assert f(v) == cf(printed=True, v=v, **fixed)
    grid = np.array([0.01, 0.2, 0.5])
    np.testing.assert_array_equal(f(grid), cf(printed=True, v=grid, **fixed))
    assert cf(v=0.2, **fixed) != cf(printed=True, v=0.2, **fixed)  # the two forms differ (eq. 70's erratum)


def test_of_refuses_bad_input_naming_the_parameter():
    cf = theory.get("linear_attention.separate.scalar_ode_integrand")
    fixed = dict(lam=0.3, a=0.5, tau=1.0)
    with pytest.raises(ValueError, match="^name: .* no parameter 'w'"):
        cf.of("w", **fixed)
    with pytest.raises(ValueError, match="^v: the variable"):
        cf.of("v", v=0.1, **fixed)
    with pytest.raises(ValueError, match="^name: Lambda .* covariance parameter, not a scalar"):
        theory.get("linear_attention.data.yq_sq").of("Lambda")
    f = cf.of("v", **fixed)
    f(0.1)                                           # validated once here; later values still checked
    with pytest.raises(ValueError, match="^v: "):
        f(-0.1)                                      # a positive parameter
    with pytest.raises(ValueError, match="^v: "):
        f(float("nan"))
    v_star = (0.3 / 0.5) ** (1 / 3)
    with pytest.raises(ValueError):
        f(2 * v_star)                                # the record's domain (v below the fixed point)
    with pytest.raises(ValueError):
        cf(v=2 * v_star, **fixed)                    # as the full call refuses it
    with pytest.raises(ValueError, match="^lam: "):
        cf.of("v", lam=-1.0, a=0.5, tau=1.0)(0.1)    # a fixed parameter, at the first call
