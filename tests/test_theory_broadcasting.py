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
