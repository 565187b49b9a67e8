"""Properties of the estimators and error measures in verify.stats."""

import numpy as np
import pytest

from verify.registry import get_check, run_check
from verify.stats import rel_err, rel_max


def test_rel_err_is_rel_max_above_the_floor():
    a, b = np.array([1.0, 2.0 + 1e-9]), np.array([1.0, 2.0])
    assert rel_err(a, b, scale=0.5) == rel_max(a, b)


def test_rel_err_judges_a_zero_reference_on_the_floor():
    # round-off against an exact zero: relative to itself it is 100 %, on the scale 1e-14
    assert rel_max([1e-14], [1e-14 + 3e-15]) > 0.1
    assert rel_err([1e-14], [0.0], scale=1.0) == pytest.approx(1e-14)


def test_rel_err_without_floor_or_entries():
    assert rel_err([], []) == 0.0
    assert rel_err([1.0], [0.0]) > 1e200  # no floor: a nonzero value against 0 is a mismatch


# seeds at which the former pure relative error failed (round-off over round-off at an
# exact zero: the gradient at a fixed point with every direction learned)
@pytest.mark.parametrize("seed", [2, 3, 4, 5, 6, 7, 9, 12])
def test_high_precision_passes_where_the_reference_vanishes(seed):
    res = run_check(get_check("linear_attention.high_precision"), seed=seed)
    assert res.passed, (res.discrepancy, res.tolerance, res.error)
    assert res.details["output_scale_per_id"]["linear_attention.separate.fixed_point_gradient"] > 0.01


def test_t_threshold_holds_the_family_wise_rate_with_few_batches():
    from scipy import stats as sst

    from verify.stats import t_threshold, z_threshold

    for n, dof in ((1, 9), (100, 199), (40, 999)):
        thr = t_threshold(n, dof)
        assert 2 * n * sst.t.sf(thr, dof) == pytest.approx(1e-6, rel=1e-6)
        assert thr > z_threshold(n)  # the normal threshold understates the rate
    assert t_threshold(100, 10**7) == pytest.approx(z_threshold(100), rel=1e-5)
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="dof"):
            t_threshold(3, bad)
