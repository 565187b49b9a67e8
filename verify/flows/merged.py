"""Exact expected-loss gradient flow of the merged key-query linear attention.

Zhang, Singh, Latham, Saxe 2025, "Training Dynamics of In-Context Learning in Linear
Attention", §3 and App. D. The merged model ``ATTN_M`` (eq. M) predicts
``yhat_q = sum_i v_i beta^T U_i x_q``; it is the two-layer linear network of eqs. 6-7,
``yhat_q = w2^T W1 z`` with ``w2 = (v_1..v_H)`` and rows ``vec(U_i)^T`` of ``W1``.

Reduced form
------------
Everything depends on the parameters only through the effective matrix
``M = sum_i v_i U_i`` (D x D). With ``A = E[Lambda_hat^2]`` (eq. 31) the population loss
(no factor 1/2) is ``L(M) = tr Lambda - 2 tr(Lambda M Lambda) + tr(M Lambda M^T A)`` and its
negative half-gradient is ``G = -1/2 dL/dM = Lambda^2 - A M Lambda``. The gradient flow of
eq. 5, ``tau dW/dt = -1/2 dL/dW``, is then eq. 8 written without any D^2 x D^2 matrix::

    tau dU_i/dt = v_i G,        tau dv_i/dt = <U_i, G>_F.

``A`` and ``Lambda^2 = E[y_q beta x_q^T]`` (eq. 43) are taken from :mod:`theory`
(``linear_attention.data.lambda_hat_sq`` and ``linear_attention.data.yq_z``), never retyped.

Time convention: gradient descent with learning rate ``eta`` on ``L`` is the Euler scheme of
the flow with step ``dt / tau = 2 eta`` (:func:`gd`).

Contents
--------
init_merged      eq.-34 random initialisation
init_aligned     balanced, aligned initialisation (the assumption behind eq. 10)
rhs              right-hand side on the flat state ``[v, vec_C(U)]``
jacobian         its Jacobian (for the implicit solvers)
integrate        solve_ivp of the flow -> :class:`FlowResult`
loss             L(M), vectorised over a leading time axis
gd               discrete gradient descent on the exact loss
s_eff            effective initial scale of the escape (derived here; not in the paper)
conserved        C = w2 w2^T - W1 W1^T (eq. 55)
half_time        time of the half-way crossing of a curve
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.integrate import solve_ivp

from .. import validate

__all__ = ["FlowResult", "Moments", "moments", "init_merged", "init_aligned", "rhs", "jacobian", "integrate", "solve",
           "loss", "gradient", "gd", "s_eff", "conserved", "half_time", "effective_matrix"]


# -- data statistics from theory ------------------------------------------------------------
@dataclass(frozen=True)
class Moments:
    """The data statistics the flow depends on, from :mod:`theory`.

    Attributes
    ----------
    Lambda : ndarray (D, D)
        Token covariance.
    A : ndarray (D, D)
        ``E[Lambda_hat^2]`` (eq. 31).
    L2 : ndarray (D, D)
        ``vec^{-1} E[y_q z] = Lambda Lambda_q = Lambda^2`` (eq. 43).
    tr : float
        ``E[y_q^2] = tr Lambda``.
    N : int
        Context length.
    """

    Lambda: np.ndarray
    A: np.ndarray
    L2: np.ndarray
    tr: float
    N: int

    @property
    def D(self) -> int:
        return self.Lambda.shape[0]


def moments(Lambda, N) -> Moments:
    """Data statistics of the in-context regression task for the flow.

    Parameters
    ----------
    Lambda : array_like
        D x D symmetric positive-definite covariance, or a list of D positive eigenvalues.
    N : int
        Context length (>= 1).
    """
    import theory
    from theory.params import covariance, index

    dims: dict = {}
    Lam = covariance("Lambda", "").validate(Lambda, dims)
    N = index("N", "").validate(N, dims)
    D = Lam.shape[0]
    A = np.asarray(theory.get("linear_attention.data.lambda_hat_sq")(Lambda=Lam, N=N), float)
    b = np.asarray(theory.get("linear_attention.data.yq_z")(Lambda=Lam), float)
    L2 = np.ascontiguousarray(b.reshape(D, D, order="F"))  # vec is column-major
    tr = float(theory.get("linear_attention.data.yq_sq")(Lambda=Lam))
    return Moments(Lam, A, L2, tr, N)


def _as_moments(Lambda, N) -> Moments:
    if isinstance(Lambda, Moments):
        if N is not None and int(N) != Lambda.N:
            raise ValueError(f"N: {N} differs from the N = {Lambda.N} of the given Moments")
        return Lambda
    return moments(Lambda, N)


# -- validation helpers ---------------------------------------------------------------------
def solve(f, y0: np.ndarray, t_eval: np.ndarray, *, method: str, rtol: float, atol: float, dense: bool,
          jac=None, stop=None):
    """``solve_ivp`` of ``dy/dt = f(t, y)`` from ``y0`` at the times ``t_eval`` (from 0): the states
    (one row per time), the dense solution (or None) and the number of evaluations of ``f``. Only
    ``t_eval = [0, ...]`` returns ``y0`` without a solve; a failed solve raises ``RuntimeError``.

    ``jac(t, y)``: the Jacobian of ``f``, passed to the implicit methods (LSODA, Radau, BDF), which
    otherwise estimate it by finite differences; ignored by the explicit ones. ``stop(t, y)``: a
    terminal event (``solve_ivp``'s ``events``): the solve ends where it first reaches 0 and only the
    rows of ``t_eval`` up to there come back. Neither changes the steps the solver takes up to there
    (the interval is still ``[0, t_eval[-1]]``)."""
    t_end = float(t_eval[-1])
    if t_end == 0.0:
        return np.repeat(y0[None], t_eval.size, axis=0), None, 0
    extra = {"jac": jac} if jac is not None and method in ("LSODA", "Radau", "BDF") else {}
    if stop is not None:
        stop.terminal = True
        extra["events"] = stop
    res = solve_ivp(f, (0.0, t_end), y0, method=method, t_eval=t_eval, rtol=rtol, atol=atol, dense_output=dense,
                    **extra)
    if not res.success:
        raise RuntimeError(f"solve_ivp failed: {res.message}")
    return res.y.T, res.sol, int(res.nfev)


def _params(v, U, D: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray(v, dtype=np.float64)
    U = np.asarray(U, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"v: expected a vector of H head scales, got shape {v.shape}")
    if U.ndim != 3 or U.shape[0] != v.shape[0] or U.shape[1] != U.shape[2]:
        raise ValueError(f"U: expected shape (H, D, D) with H = {v.shape[0]}, got {U.shape}")
    if D is not None and U.shape[1] != D:
        raise ValueError(f"U: expected D = {D} from Lambda, got matrices of size {U.shape[1]}")
    if not (np.all(np.isfinite(v)) and np.all(np.isfinite(U))):
        raise ValueError("v: parameters contain NaN or infinity")
    return v, U


# -- initialisations ------------------------------------------------------------------------
def init_merged(rng: np.random.Generator, H: int, D: int, w_init: float):
    """Random initialisation of eq. 34 (App. C.2).

    ``v_i ~ N(0, w_init^2 / H)`` and ``U_i^{d,d'} ~ N(0, w_init^2 / (H D^2))``, so that
    ``E||w2||^2 = E||W1||_F^2 = w_init^2`` (eq. 35): balanced in expectation, not aligned.

    Parameters
    ----------
    rng : numpy.random.Generator
    H, D : int
        Number of heads and token dimension.
    w_init : float
        Initialisation scale (> 0).

    Returns
    -------
    v : ndarray (H,)
    U : ndarray (H, D, D)
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    H, D = validate.integer("H", H), validate.integer("D", D)
    w_init = validate.positive("w_init", w_init)
    v = rng.normal(0.0, w_init / np.sqrt(H), size=H)
    U = rng.normal(0.0, w_init / (np.sqrt(H) * D), size=(H, D, D))
    return v, U


def init_aligned(H: int, D: int, w_init: float, direction=None, heads=None):
    """Balanced and aligned initialisation: ``U_i = v_i m`` with ``||w2|| = w_init``.

    This is the initial condition under which eq. 10 is the exact solution (App. D.5,
    eq. 47): ``W1(0) = w2(0) m^T`` with ``m = E[y_q z] / ||E[y_q z]||``, so the conserved
    quantity of eq. 55 vanishes and ``s(0) = ||w2(0)||^2 = w_init^2``.

    Parameters
    ----------
    H, D : int
        Number of heads and token dimension.
    w_init : float
        ``||w2(0)|| = ||W1(0)||_F`` (> 0).
    direction : array_like (D, D), optional
        The matrix ``vec^{-1}(m)`` up to normalisation; ``E[y_q z]`` reshaped is
        ``Lambda^2`` (eq. 43), so pass ``Lambda^2`` (e.g. ``moments(...).L2``). Default: the
        white case ``I_D`` (normalised to ``I / sqrt(D)``).
    heads : array_like (H,), optional
        Direction of ``w2(0)`` (normalised); default all heads equal.

    Returns
    -------
    v : ndarray (H,)
    U : ndarray (H, D, D)
    """
    H, D = validate.integer("H", H), validate.integer("D", D)
    w_init = validate.positive("w_init", w_init)
    m = np.eye(D) if direction is None else np.asarray(direction, dtype=np.float64)
    if m.shape != (D, D):
        raise ValueError(f"direction: expected shape ({D}, {D}), got {m.shape}")
    nm = np.linalg.norm(m)
    if not np.isfinite(nm) or nm == 0:
        raise ValueError("direction: must be a finite non-zero matrix")
    m = m / nm
    h = np.ones(H) if heads is None else np.asarray(heads, dtype=np.float64)
    if h.shape != (H,):
        raise ValueError(f"heads: expected shape ({H},), got {h.shape}")
    nh = np.linalg.norm(h)
    if not np.isfinite(nh) or nh == 0:
        raise ValueError("heads: must be a finite non-zero vector")
    v = w_init * h / nh
    U = v[:, None, None] * m[None]
    return v, U


# -- the flow -------------------------------------------------------------------------------
def effective_matrix(v, U) -> np.ndarray:
    """``M = sum_i v_i U_i``; vectorised over leading axes (``v (..., H)``, ``U (..., H, D, D)``)."""
    return np.einsum("...i,...ijk->...jk", np.asarray(v, float), np.asarray(U, float))


def gradient(Lambda, N, M) -> np.ndarray:
    """``G = -1/2 dL/dM = Lambda^2 - A M Lambda`` (reduced form of eq. 8); vectorised over
    leading axes of ``M``."""
    mo = _as_moments(Lambda, N)
    M = np.asarray(M, dtype=np.float64)
    return mo.L2 - mo.A @ M @ mo.Lambda


def loss(Lambda, N, M) -> np.ndarray:
    """Population loss ``L(M) = tr Lambda - 2 tr(Lambda M Lambda) + tr(M Lambda M^T A)``.

    The same quantity as ``theory.get("linear_attention.merged.loss")``, written so that it
    is vectorised over a leading axis of ``M`` (shape ``(..., D, D)``); the tests check that
    the two agree.
    """
    mo = _as_moments(Lambda, N)
    M = np.asarray(M, dtype=np.float64)
    lin = np.einsum("...jk,jk->...", M, mo.L2.T)          # tr(Lambda M Lambda_q) = <M, L2^T>
    quad = np.einsum("...jk,...jk->...", M @ mo.Lambda, mo.A @ M)  # tr(M Lambda M^T A)
    return mo.tr - 2.0 * lin + quad


def rhs(Lambda, N, tau: float = 1.0) -> Callable[[float, np.ndarray], np.ndarray]:
    """Right-hand side ``f(t, y)`` of the flow on the flat state ``y = [v, U.ravel()]``.

    ``U.ravel()`` is numpy's C order of the (H, D, D) array; H is read from ``len(y)``.
    Cost per call: O(H D^2 + D^3).
    """
    mo = _as_moments(Lambda, N)
    tau = validate.positive("tau", tau)
    D = mo.D
    L2, A, Lam = mo.L2, mo.A, mo.Lambda
    inv_tau = 1.0 / tau

    def f(t, y):
        H = y.shape[0] // (1 + D * D)
        v = y[:H]
        U = y[H:].reshape(H, D, D)
        M = np.tensordot(v, U, axes=1)
        G = L2 - A @ M @ Lam
        if inv_tau != 1.0:
            G *= inv_tau
        out = np.empty_like(y)
        out[:H] = U.reshape(H, -1) @ G.reshape(-1)
        # written in place: no (H, D, D) temporary (large temporaries cost page faults)
        np.multiply(v[:, None, None], G, out=out[H:].reshape(H, D, D))
        return out

    return f


def _vec_gradient(mo: Moments, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """``(C, l2)`` with ``vec_C(G) / tau = l2 - C vec_C(M)``: ``C = A (x) Lambda / tau`` (C-order vec,
    ``vec_C(A M Lambda) = (A (x) Lambda^T) vec_C(M)``) and ``l2 = vec_C(Lambda^2) / tau``."""
    return np.kron(mo.A, mo.Lambda.T) / tau, np.ascontiguousarray(mo.L2).ravel() / tau


def jacobian(Lambda, N, H: int, tau: float = 1.0) -> Callable[[float, np.ndarray], np.ndarray]:
    """Jacobian ``J(t, y) = d f / d y`` of :func:`rhs` on ``y = [v, U.ravel()]`` (dense, symmetric).

    ``f = J_M^T vec G`` with ``J_M = d vec M / d y`` (columns ``vec U_i`` for ``v_i``, ``v_i e_ab`` for
    ``U_i^ab``) and ``vec G = vec(Lambda^2) / tau - C vec M``, ``C = A (x) Lambda / tau`` (C-order vec), so
    ``J = -J_M^T C J_M`` plus ``G_ab`` at ``(v_i, U_i^ab)`` and ``(U_i^ab, v_i)``. Given to the implicit
    solvers (LSODA's stiff phase, Radau, BDF) in place of finite differences (``H + H D^2`` evaluations
    of ``f`` each).
    """
    mo = _as_moments(Lambda, N)
    H = validate.integer("H", H)
    C, l2 = _vec_gradient(mo, validate.positive("tau", tau))
    D = mo.D
    D2 = D * D
    rows = np.repeat(np.arange(H), D2)
    cols = H + np.arange(H * D2)

    def jac(t, y):
        v = y[:H]
        Uf = y[H:].reshape(H, D2)
        g = l2 - C @ (v @ Uf)
        UC = Uf @ C
        J = np.empty((H + H * D2, H + H * D2))
        J[:H, :H] = -(UC @ Uf.T)
        vU = (-UC[:, None, :] * v[None, :, None]).reshape(H, H * D2)
        vU[rows, cols - H] += np.tile(g, H)
        J[:H, H:] = vU
        J[H:, :H] = vU.T
        J[H:, H:] = (np.multiply.outer(-v, v)[:, None, :, None] * C[None, :, None, :]).reshape(H * D2, H * D2)
        return J

    return jac


def _pack(v, U) -> np.ndarray:
    return np.concatenate([v, U.ravel()])


def _unpack(y: np.ndarray, H: int, D: int):
    """``y`` of shape (..., H + H D^2) -> v (..., H), U (..., H, D, D)."""
    return y[..., :H], y[..., H:].reshape(y.shape[:-1] + (H, D, D))


@dataclass
class FlowResult:
    """A trajectory of the merged model.

    Attributes
    ----------
    t : ndarray (T,)
        Times (in the units of ``tau``; for :func:`gd`, ``t / tau = 2 eta k``).
    v : ndarray (T, H)
    U : ndarray (T, H, D, D)
    M : ndarray (T, D, D)
        Effective matrix ``sum_i v_i U_i``.
    loss : ndarray (T,)
        Population loss ``L(M(t))``.
    steps : ndarray (T,) or None
        Gradient-descent step numbers (:func:`gd` only).
    sol : callable or None
        Dense output of the solver on the flat state (``integrate(..., dense=True)``).
    nfev : int
        Number of right-hand-side evaluations.
    """

    t: np.ndarray
    v: np.ndarray
    U: np.ndarray
    M: np.ndarray
    loss: np.ndarray
    steps: np.ndarray | None = None
    sol: Callable | None = None
    nfev: int = 0

    @property
    def W1(self) -> np.ndarray:
        """First layer of eq. 7: rows ``vec(U_i)`` (column-major), shape (T, H, D^2)."""
        T, H, D, _ = self.U.shape
        return np.swapaxes(self.U, -1, -2).reshape(T, H, D * D)

    def at(self, t) -> tuple[np.ndarray, np.ndarray]:
        """``(v, U)`` at time(s) ``t`` from the dense output (needs ``dense=True``)."""
        if self.sol is None:
            raise ValueError("t: no dense output; integrate with dense=True")
        H, D = self.U.shape[1], self.U.shape[2]
        y = np.asarray(self.sol(t)).T
        return _unpack(y, H, D)

    def crossing(self, curve, level: float, func: Callable[[np.ndarray, np.ndarray], float]) -> float:
        """First time at which a quantity crosses ``level``, refined on the dense output.

        Parameters
        ----------
        curve : array_like (T,)
            The quantity sampled at :attr:`t` (locates the bracketing interval).
        level : float
        func : callable
            ``func(v, U) -> float``, the same quantity from the parameters (root-found with
            ``brentq`` to ``xtol = 1e-12`` inside the bracket).
        """
        from scipy.optimize import brentq

        c = np.asarray(curve, dtype=np.float64) - level
        if c.shape != self.t.shape:
            raise ValueError(f"curve: expected shape {self.t.shape}, got {c.shape}")
        s = np.sign(c[0]) if c[0] != 0 else 0.0
        if s == 0:
            return float(self.t[0])
        idx = np.nonzero(np.sign(c) != s)[0]
        if idx.size == 0:
            raise ValueError("level: the curve never crosses it on the integration grid")
        k = int(idx[0])

        def g(tt):
            v, U = self.at(tt)
            return float(func(v, U)) - level

        return float(brentq(g, self.t[k - 1], self.t[k], xtol=1e-12, rtol=4 * np.finfo(float).eps))


def integrate(Lambda, N, v0, U0, *, tau: float = 1.0, t_eval, rtol: float = 1e-10,
              atol: float | None = None, method: str = "DOP853", dense: bool = False) -> FlowResult:
    """Integrate the exact gradient flow (eq. 8 in the reduced form) from ``(v0, U0)``.

    Parameters
    ----------
    Lambda : array_like or Moments
        Token covariance (matrix or eigenvalues), or precomputed :func:`moments`.
    N : int
        Context length.
    v0 : array_like (H,)
    U0 : array_like (H, D, D)
    tau : float
        Time constant of eq. 5.
    t_eval : array_like (T,)
        Non-decreasing output times >= 0; the flow starts at ``t = 0``.
    rtol : float
        Relative tolerance of the solver.
    atol : float, optional
        Absolute tolerance. Default ``1e-12 * min(1, max|y0|)^2``: far below the parameter
        scale ``~ w_init`` even for tiny initialisations, so that accuracy in the plateau
        is relative (set by ``rtol``), not absolute.
    method : str
        ``solve_ivp`` method.
    dense : bool
        Keep the solver's dense output in :attr:`FlowResult.sol`.

    Returns
    -------
    FlowResult
    """
    mo = _as_moments(Lambda, N)
    v0, U0 = _params(v0, U0, mo.D)
    tau = validate.positive("tau", tau)
    rtol = validate.positive("rtol", rtol)
    t_eval = validate.times("t_eval", t_eval)
    y0 = _pack(v0, U0)
    if atol is None:
        scale = min(1.0, float(np.max(np.abs(y0))))
        atol = 1e-12 * scale**2 if scale > 0 else 1e-300
    atol = validate.positive("atol", atol)
    H, D = v0.shape[0], mo.D
    f = rhs(mo, None, tau)
    Y, sol, nfev = solve(f, y0, t_eval, method=method, rtol=rtol, atol=atol, dense=dense,
                         jac=jacobian(mo, None, H, tau))
    v, U = _unpack(Y, H, D)
    M = effective_matrix(v, U)
    return FlowResult(t=t_eval.copy(), v=v, U=U, M=M, loss=loss(mo, None, M), sol=sol, nfev=nfev)


def gd(Lambda, N, v0, U0, eta: float, steps: int, record_every: int = 1) -> FlowResult:
    """Gradient descent with learning rate ``eta`` on the exact population loss.

    One step is ``U_i <- U_i - eta dL/dU_i = U_i + 2 eta v_i G`` and
    ``v_i <- v_i + 2 eta <U_i, G>``: the Euler scheme of eq. 5 with ``dt / tau = 2 eta``
    (the loss has no factor 1/2). The returned times are ``t / tau = 2 eta k``.

    Parameters
    ----------
    Lambda, N : as for :func:`integrate`
    v0, U0 : initial parameters
    eta : float
        Learning rate (> 0).
    steps : int
        Number of steps (>= 0).
    record_every : int
        Keep every ``record_every``-th iterate (and the last).

    Returns
    -------
    FlowResult
        With ``steps`` set to the recorded step numbers.
    """
    mo = _as_moments(Lambda, N)
    v, U = _params(v0, U0, mo.D)
    eta = validate.positive("eta", eta)
    steps = validate.integer("steps", steps, low=0)
    record_every = validate.integer("record_every", record_every)
    v, U = v.copy(), U.copy()
    L2, A, Lam = mo.L2, mo.A, mo.Lambda
    ks, vs, Us = [0], [v.copy()], [U.copy()]
    two_eta = 2.0 * eta
    for k in range(1, steps + 1):
        M = np.tensordot(v, U, axes=1)
        G = L2 - A @ M @ Lam
        dv = np.tensordot(U, G, axes=([1, 2], [0, 1]))
        U += two_eta * v[:, None, None] * G
        v += two_eta * dv
        if k % record_every == 0 or k == steps:
            ks.append(k)
            vs.append(v.copy())
            Us.append(U.copy())
    k = np.asarray(ks)
    V, UU = np.asarray(vs), np.asarray(Us)
    M = effective_matrix(V, UU)
    return FlowResult(t=two_eta * k, v=V, U=UU, M=M, loss=loss(mo, None, M), steps=k)


# -- derived quantities ---------------------------------------------------------------------
def s_eff(v0, U0, Lambda) -> float:
    """Effective initial scale ``s_eff = ||(w2(0) + W1(0) m) / 2||^2``.

    ``m = E[y_q z] / ||E[y_q z]||``, i.e. ``vec(Lambda^2) / ||Lambda^2||_F``, and the rows of
    ``W1`` are ``vec(U_i)``, so ``(W1 m)_i = <U_i, Lambda^2>_F / ||Lambda^2||_F``. In the
    linearised (plateau) dynamics ``w2 + W1 m`` grows as ``exp(gamma t / tau)`` while the
    orthogonal parts stay ``O(w_init)``; replacing ``w_init^2`` by ``s_eff`` in eq. 10 makes
    it exact to leading order for an arbitrary small initialisation (derived
    here; not in the paper). For the balanced, aligned start of :func:`init_aligned`
    with ``m`` along ``Lambda^2`` it equals ``w_init^2``.
    """
    import theory
    from theory.params import covariance

    dims: dict = {}
    Lam = covariance("Lambda", "").validate(Lambda, dims)
    D = Lam.shape[0]
    v0, U0 = _params(v0, U0, D)
    m = np.asarray(theory.get("linear_attention.data.yq_z")(Lambda=Lam), float).reshape(D, D, order="F")
    m = m / np.linalg.norm(m)
    proj = np.einsum("ijk,jk->i", U0, m)
    return float(np.sum((0.5 * (v0 + proj)) ** 2))


def conserved(v, U) -> np.ndarray:
    """``C = w2 w2^T - W1 W1^T`` (eq. 55), i.e. ``C_ij = v_i v_j - <U_i, U_j>_F``.

    Vectorised over leading axes: ``v (..., H)``, ``U (..., H, D, D)`` -> ``(..., H, H)``.
    Constant along the gradient flow; drifts by O(eta) under gradient descent.
    """
    v = np.asarray(v, dtype=np.float64)
    U = np.asarray(U, dtype=np.float64)
    if v.shape[-1:] != U.shape[-3:-2] or U.shape[:-3] != v.shape[:-1] or U.shape[-1] != U.shape[-2]:
        raise ValueError(f"U: shape {U.shape} does not match v of shape {v.shape} "
                         "(expected v (..., H), U (..., H, D, D))")
    return v[..., :, None] * v[..., None, :] - np.einsum("...ijk,...ljk->...il", U, U)


def half_time(t, curve, final=None, initial=None) -> float:
    """Time at which ``curve`` first crosses half-way between its initial and final values.

    For a loss this is the half-drop time, for ``sigma(t)`` the half-rise time. Linear
    interpolation between the two samples around the crossing.

    Parameters
    ----------
    t : array_like (T,)
        Increasing times (or step numbers).
    curve : array_like (T,)
    final : float, optional
        The final level (default ``curve[-1]``), e.g. the global minimum loss when the run
        stops before full convergence.
    initial : float, optional
        The initial level (default ``curve[0]``).
    """
    t = np.asarray(t, dtype=np.float64)
    c = np.asarray(curve, dtype=np.float64)
    if t.ndim != 1 or c.shape != t.shape or t.size < 2:
        raise ValueError(f"curve: expected the shape of t {t.shape} with at least 2 samples, got {c.shape}")
    c0 = float(c[0] if initial is None else initial)
    cf = float(c[-1] if final is None else final)
    if c0 == cf:
        raise ValueError("curve: initial and final levels are equal; no half-way crossing")
    target = 0.5 * (c0 + cf)
    s = np.sign(cf - c0)
    past = np.nonzero(s * (c - target) >= 0)[0]
    if past.size == 0:
        raise ValueError("curve: never reaches half-way between its initial and final levels")
    k = int(past[0])
    if k == 0:
        return float(t[0])
    c1, c2 = c[k - 1], c[k]
    return float(t[k - 1] + (target - c1) * (t[k] - t[k - 1]) / (c2 - c1))
