"""The closed form against a torch two-layer linear network trained by full-batch gradient descent."""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.settings import Setting

from ..dynamics import problem, shallow, wrong_rate


@check("saxe_linear.modes.torch_gradient_descent", method="torch", needs=["torch"],
       covers=["saxe_linear.modes.strength"],
       title="Mode strengths of a torch two-layer linear network trained by full-batch gradient descent",
       settings=[Setting("lr", "float", quick=3e-3, full=3e-4, low=1e-5, high=0.1,
                         doc="learning rate (one step is dt = lr tau of the flow)")])
def torch_gradient_descent(ctx):
    import torch

    strength, learning_time = theory.get("saxe_linear.modes.strength"), theory.get("saxe_linear.modes.learning_time")
    p = problem(ctx.rng, u0_range=(1e-3, 1e-2))
    n_in, n_hidden, n_out = p.V.shape[0], p.W21.shape[0], p.U.shape[0]
    # whitened inputs: P samples with X^T X / P = I exactly; targets y = Sigma31 x (Sigma31 = E[y x^T])
    P = 32
    g = ctx.torch_generator()
    q, _ = torch.linalg.qr(torch.randn(P, n_in, generator=g, dtype=torch.float64))
    X = q * P ** 0.5
    Y = X @ torch.as_tensor(p.sigma31).T
    net = torch.nn.Sequential(torch.nn.Linear(n_in, n_hidden, bias=False),
                              torch.nn.Linear(n_hidden, n_out, bias=False)).double()
    with torch.no_grad():
        net[0].weight.copy_(torch.as_tensor(p.W21))
        net[1].weight.copy_(torch.as_tensor(p.W32))
    # loss 1/2 E||y - yhat||^2: one step of rate lr is dt = lr tau of the flow (tau = 1)
    lr = ctx.setting("lr")
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    half = learning_time(s=p.s, u0=p.u0, u_f=p.s / 2, tau=p.tau)
    steps = int(np.ceil(2.5 * np.max(half) / lr))
    every = max(1, steps // 100)
    U, V = torch.as_tensor(p.U), torch.as_tensor(p.V)
    ts, measured = [], []
    for k in range(steps + 1):
        if k % every == 0:
            with torch.no_grad():
                ts.append(k * lr)
                measured.append(torch.diagonal(U.T @ net[1].weight @ net[0].weight @ V).numpy().copy())
        if k == steps:
            break
        opt.zero_grad()
        loss = 0.5 * ((Y - net(X)) ** 2).sum(dim=1).mean()
        loss.backward()
        opt.step()
    ts, measured = np.array(ts), np.array(measured).T
    grid = dict(s=p.s[:, None], u0=p.u0[:, None], t=ts[None, :], tau=p.tau)
    predicted = strength(**grid)
    discrepancy = float(np.max(np.abs(measured - predicted) / p.s[:, None]))
    # first-order discretisation: each step grows u by (1 + lr s)^2 instead of e^{2 lr s}, which
    # delays the rise by about (lr s / 2) t_half; the steepest slope of u/s is s/2, so the gap
    # is about lr s^2 t_half / 4; the tolerance allows 3 times the largest over the modes
    estimate = float(np.max(lr * p.s ** 2 * half / 4))
    tolerance = 3 * estimate
    controls = []
    for name, wrong in (("logistic at rate s instead of 2s", wrong_rate),
                        ("single-layer network: exponential approach", shallow)):
        w = wrong(**grid)
        controls.append(Control(name, float(np.max(np.abs(measured - w) / p.s[:, None])), tolerance,
                                expected=float(np.max(np.abs(predicted - w) / p.s[:, None]))))
    return Outcome(
        measured={"final": measured[:, -1].tolist()}, predicted={"final": predicted[:, -1].tolist()},
        discrepancy=discrepancy, tolerance=tolerance,
        criterion=f"max over modes and {len(ts)} times of |u - closed form| / s < 3 x the first-order "
                  f"discretisation gap lr s^2 t_half / 4 = {estimate:.2g} (lr = {lr:g}, tau = 1)",
        controls=controls,
        details={"s": p.s.tolist(), "u0": p.u0.tolist(), "lr": lr, "steps": steps, "samples": P,
                 "discretisation_estimate": estimate},
        figures={"mode_strengths": {"t": ts, **{f"mode {k + 1}": measured[k] for k in range(len(p.s))},
                                    **{f"theory {k + 1}": predicted[k] for k in range(len(p.s))}}},
    )
