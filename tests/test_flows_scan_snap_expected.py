"""verify.flows.scan_snap_expected: the hand-written chain rule against torch autograd of the same loss."""

from __future__ import annotations

import numpy as np
import pytest

from verify.checks.scan_snap.attention_residual import two_query_classes
from verify.checks.scan_snap.common_tokens_flow import common_classes
from verify.flows.scan_snap_expected import expected_run


def _autograd_run(classes, eta_Y, eta_Z, steps, residual, Z0=None):
    """The same gradient descent with torch autograd (float64): the class-averaged cross-entropy of
    softmax(out_n Y), out_n = LN(c_n) or LN(LN(c_n) + e_psi(n)), c_n = softmax(ln P(.|n) + Z[psi(n)])."""
    torch = pytest.importorskip("torch")
    M = classes.M
    support = torch.as_tensor(classes.P > 0)
    logP = torch.where(support, torch.log(torch.as_tensor(np.where(classes.P > 0, classes.P, 1.0))),
                       torch.tensor(-torch.inf, dtype=torch.float64))
    psi, label = torch.as_tensor(classes.psi), torch.as_tensor(classes.label)
    Y = torch.zeros(M, M, dtype=torch.float64, requires_grad=True)
    Z = torch.as_tensor(np.zeros((M, M)) if Z0 is None else np.asarray(Z0, dtype=np.float64)).clone()
    Z.requires_grad_(True)
    e_q = torch.nn.functional.one_hot(psi, M).to(torch.float64)
    zs = [Z.detach().numpy()[np.unique(classes.psi)].copy()]
    for _ in range(steps):
        c = torch.softmax(logP + Z[psi], dim=1)
        out = c / c.norm(dim=1, keepdim=True)
        if residual:
            out = out + e_q
            out = out / out.norm(dim=1, keepdim=True)
        loss = torch.nn.functional.cross_entropy(out @ Y, label)
        gY, gZ = torch.autograd.grad(loss, (Y, Z))
        with torch.no_grad():
            Y -= eta_Y * gY
            Z -= eta_Z * gZ
        zs.append(Z.detach().numpy()[np.unique(classes.psi)].copy())
    return np.array(zs), Y.detach().numpy(), Z.detach().numpy()


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("classes", [common_classes((3.0, 1.5, 0.5), 3), two_query_classes(1.0, 1.0)],
                         ids=["one query", "two queries"])
def test_chain_rule_matches_autograd(classes, residual):
    rng = np.random.default_rng(0)
    Z0 = 0.3 * rng.standard_normal((classes.M, classes.M))
    zs, Y, Z = _autograd_run(classes, 1.0, 0.05, 60, residual, Z0)
    run = expected_run(classes, 1.0, 0.05, 60, residual=residual, Z0=Z0)
    assert np.abs(run["z"] - zs).max() <= 1e-13 * np.abs(zs).max()
    assert np.abs(run["Y"] - Y).max() <= 1e-13 * np.abs(Y).max()
    assert np.abs(run["Z"] - Z).max() <= 1e-13 * np.abs(Z).max()
    assert run["steps"].tolist() == list(range(61))


def test_record_every_and_bad_steps():
    classes = common_classes((2.0, 1.0), 4)
    run = expected_run(classes, 1.0, 0.05, 10, record_every=5)
    assert run["steps"].tolist() == [0, 5, 10] and run["z"].shape == (3, 1, classes.M)
    with pytest.raises(ValueError, match="steps"):
        expected_run(classes, 1.0, 0.05, -1)
    with pytest.raises(ValueError, match="steps"):
        expected_run(classes, 1.0, 0.05, 5, record_every=0)
