"""The elementary functions of each numeric backend (theory.backends)."""

import math

import mpmath
import numpy as np
import pytest
import torch

from theory.backends import BACKENDS, backend_ops, working


@pytest.mark.parametrize("backend", BACKENDS)
def test_functions_agree_across_backends(backend):
    ops = backend_ops(backend)
    x = ops.number(0.3)
    for f, ref in ((ops.exp, math.exp(0.3)), (ops.log, math.log(0.3)), (ops.log1p, math.log1p(0.3))):
        assert float(f(x)) == pytest.approx(ref, rel=1e-15)
    # plain numbers work too (torch converts them to float64 tensors)
    assert float(ops.log1p(1e-20)) == pytest.approx(1e-20, rel=1e-15)


def test_types():
    assert isinstance(backend_ops("mpmath").number(0.1), mpmath.mpf)
    t = backend_ops("torch").number(np.float32(0.5))
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float64
    g = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    backend_ops("torch").exp(g).backward()  # the graph survives the conversion
    assert float(g.grad) == pytest.approx(math.exp(0.5), rel=1e-15)


def test_working_precision_only_under_mpmath():
    with mpmath.workdps(40):
        assert isinstance(working("mpmath", 3), mpmath.mpf)
        assert abs(1 / working("mpmath", 3) - mpmath.mpf(1) / 3) < mpmath.mpf(10) ** -39
    assert working("numpy", 3) == 3 and working("torch", 2.5) == 2.5


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="^backend: "):
        backend_ops("jax")
