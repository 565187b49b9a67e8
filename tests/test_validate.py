"""verify.validate: one vocabulary for the arguments of models, samplers and flows."""

import numpy as np
import pytest
import torch

from verify import validate


def test_good_values_are_normalised():
    assert validate.integer("N", np.int64(5)) == 5 and type(validate.integer("N", 5)) is int
    assert validate.positive("tau", np.float32(0.5)) == 0.5
    assert validate.nonnegative("std", 0) == 0.0
    arr = validate.real_array("X", torch.ones(2, 3), (2, 3))
    assert arr.dtype == np.float64 and arr.shape == (2, 3)
    assert validate.covariance("Lambda", [2.0, 1.0]).shape == (2, 2)
    assert validate.times("t_eval", [0, 0, 1.5]).tolist() == [0.0, 0.0, 1.5]
    g = torch.Generator()
    assert validate.generator(g) is g


@pytest.mark.parametrize("call, message", [
    (lambda: validate.integer("N", True), "^N: expected an integer >= 1"),
    (lambda: validate.integer("N", 2.0), "^N: expected an integer"),
    (lambda: validate.integer("H", 0), "^H: expected an integer >= 1, got 0"),
    (lambda: validate.integer("B", np.bool_(True)), "^B: expected an integer"),
    (lambda: validate.rng(0), "^rng: expected a numpy.random.Generator"),
    (lambda: validate.positive("lr", 0.0), "^lr: must be a finite number > 0"),
    (lambda: validate.positive("lr", "0.1"), "^lr: expected a real number"),
    (lambda: validate.positive("lr", float("nan")), "^lr: must be a finite number"),
    (lambda: validate.nonnegative("std", -1e-9), "^std: must be a finite number >= 0"),
    (lambda: validate.real_array("Z0", [[1.0, np.inf]], 2), "^Z0: contains NaN or infinity"),
    (lambda: validate.real_array("Z0", [1.0], (2, 3)), "^Z0: expected 2 or 3 dimensions"),
    (lambda: validate.real_array("Z0", {"a": 1}, 1), "^Z0: expected real numbers"),
    (lambda: validate.generator(0), "^generator: expected a torch.Generator"),
    (lambda: validate.covariance("Sigma", [[1.0, 2.0], [2.0, 1.0]]), "^Sigma: "),
    (lambda: validate.times("t_eval", []), "^t_eval: expected a non-empty 1-D array"),
    (lambda: validate.times("t_eval", [1.0, 0.5]), "^t_eval: times must be >= 0 and non-decreasing"),
    (lambda: validate.times("t_eval", [-1.0, 0.5]), "^t_eval: times must be >= 0"),
])
def test_bad_values_name_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()
