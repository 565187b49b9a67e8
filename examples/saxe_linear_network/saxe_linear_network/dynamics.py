"""The two-layer linear network of Saxe et al. 2014, set up for the checks (numpy).

:func:`problem` draws a task and a balanced initialisation aligned with its singular vectors;
:func:`flow` is the exact matrix gradient flow; :func:`strengths` reads each mode's strength
``u_alpha^T W32 W21 v_alpha`` (and the largest off-diagonal entry, zero while the modes stay
decoupled).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Problem:
    """Sigma31 = U diag(s) V^T (N3 x N1), the initial weights, the time constant."""

    U: np.ndarray       # N3 x K, the output singular vectors
    V: np.ndarray       # N1 x K, the input singular vectors
    s: np.ndarray       # K singular values, descending
    u0: np.ndarray      # K initial strengths
    W21: np.ndarray     # N2 x N1
    W32: np.ndarray     # N3 x N2
    tau: float = 1.0

    @property
    def sigma31(self) -> np.ndarray:
        return (self.U * self.s) @ self.V.T


def _orthogonal(rng, n: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def problem(rng, modes: int = 4, n_in: int = 5, n_out: int = 4, s_range=(1.0, 3.0),
            u0_range=(1e-4, 1e-2)) -> Problem:
    """A random task with ``modes`` singular values drawn uniformly in ``s_range`` (at least 0.1
    apart), random singular vectors, log-uniform initial strengths, and the balanced aligned
    initialisation ``W21 = R diag(sqrt(u0)) V^T``, ``W32 = U diag(sqrt(u0)) R^T`` (R a random
    rotation of the hidden layer, which has ``modes`` units)."""
    while True:
        s = np.sort(rng.uniform(*s_range, modes))[::-1]
        if modes == 1 or np.min(-np.diff(s)) >= 0.1:
            break
    U = _orthogonal(rng, n_out)[:, :modes]
    V = _orthogonal(rng, n_in)[:, :modes]
    R = _orthogonal(rng, modes)
    u0 = np.exp(rng.uniform(np.log(u0_range[0]), np.log(u0_range[1]), modes))
    root = np.sqrt(u0)
    return Problem(U, V, s, u0, W21=(R * root) @ V.T, W32=(U * root) @ R.T)


def flow(p: Problem, t_end: float, t_eval: np.ndarray, rtol: float = 1e-10, atol: float = 1e-13):
    """Integrate ``tau dW21/dt = W32^T E``, ``tau dW32/dt = E W21^T`` (E = Sigma31 - W32 W21) with
    DOP853; the events are the times each mode crosses half its singular value."""
    from scipy.integrate import solve_ivp

    sig, n2, n1 = p.sigma31, p.W21.shape[0], p.W21.shape[1]

    def unpack(y):
        return y[: n2 * n1].reshape(n2, n1), y[n2 * n1:].reshape(-1, n2)

    def rhs(_, y):
        W21, W32 = unpack(y)
        E = sig - W32 @ W21
        return np.concatenate([(W32.T @ E).ravel(), (E @ W21.T).ravel()]) / p.tau

    def crossing(k):
        def event(_, y):
            W21, W32 = unpack(y)
            return p.U[:, k] @ W32 @ W21 @ p.V[:, k] - p.s[k] / 2
        event.direction = 1
        return event

    y0 = np.concatenate([p.W21.ravel(), p.W32.ravel()])
    sol = solve_ivp(rhs, (0.0, t_end), y0, method="DOP853", rtol=rtol, atol=atol, t_eval=t_eval,
                    events=[crossing(k) for k in range(len(p.s))])
    if not sol.success:
        raise RuntimeError(f"solve_ivp: {sol.message}")
    products = [W32 @ W21 for W21, W32 in (unpack(y) for y in sol.y.T)]
    half_times = np.array([ev[0] if len(ev) else np.nan for ev in sol.t_events])
    return products, half_times


def strengths(p: Problem, product: np.ndarray) -> tuple[np.ndarray, float]:
    """Each mode's strength ``u_k^T W32 W21 v_k``, and the largest |off-diagonal| entry of
    ``U^T W32 W21 V`` relative to the largest singular value."""
    M = p.U.T @ product @ p.V
    off = M - np.diag(np.diag(M))
    return np.diag(M).copy(), float(np.max(np.abs(off)) / p.s[0])


# -- the wrong hypotheses of the negative controls ------------------------------------------
def wrong_rate(s, u0, t, tau):
    """Negative control: the logistic at rate s instead of 2s (one of the two layers frozen)."""
    e = np.exp(s * t / tau)
    return s * e / (e - 1 + s / u0)


def shallow(s, u0, t, tau):
    """Negative control: a single-layer network, tau du/dt = s - u: an exponential approach."""
    return s - (s - u0) * np.exp(-t / tau)
