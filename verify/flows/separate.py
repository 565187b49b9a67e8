"""Exact expected-loss gradient flow of separate key/query linear attention (``ATTN_S``).

Zhang, Singh, Latham, Saxe 2025, "Training Dynamics of In-Context Learning in Linear
Attention", §4-5 and App. E-F. With the zero blocks of the value and key matrices at zero
(App. F.1), ``H`` heads of rank ``R`` predict

    yhat_q = sum_i sum_r v_i beta^T k_{ir} q_{ir}^T x_q = beta^T M x_q,
    M = sum_{i,r} v_i k_{ir} q_{ir}^T                                  (eq. S / 12)

so the population loss is the merged model's ``L(M)`` (:func:`verify.flows.merged.loss`)
and ``G = -1/2 dL/dM = Lambda^2 - A M Lambda`` with ``A = E[Lambda_hat^2]`` (eq. 57). The
flow ``tau dW/dt = -1/2 dL/dW`` (eq. 5) is, without any D^2 x D^2 matrix (eqs. 14, 83)::

    tau dv_i/dt    = sum_r k_ir^T G q_ir
    tau dk_ir/dt   = v_i G q_ir
    tau dq_ir/dt   = v_i G^T k_ir.

The data statistics (``Lambda``, ``A``, ``Lambda^2``) come from :func:`verify.flows.merged.moments`,
which takes them from :mod:`theory`.

Contents
--------
eigenbasis             eigenvalues (descending) and eigenvectors of Lambda
init_separate          eq.-36 random initialisation
init_aligned_separate  balanced, aligned start (the manifold on which eq. 21 is exact)
effective_matrix       M = sum v_i k_ir q_ir^T
gradients              (dv, dk, dq) = -1/(2 tau) dL/d(v, k, q)
rhs                    right-hand side on the flat state [v, k, q]
jacobian               its Jacobian (for the implicit solvers)
integrate              solve_ivp of the flow -> :class:`SeparateFlowResult`
integrate_past         the same, stopped once the loss is past a level
conserved              the conservation laws of eqs. 82 and 88
plateaus               time spent near each predicted level, and the drop times
first_crossing         first crossing of a level, optionally refined by root finding
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import validate
from .merged import Moments, _as_moments, _vec_gradient, loss, moments, solve

__all__ = [
    "deviations",
    "rotated_pair",
    "Moments",
    "Plateaus",
    "SeparateFlowResult",
    "conserved",
    "effective_matrix",
    "eigenbasis",
    "first_crossing",
    "gradients",
    "init_aligned_separate",
    "init_separate",
    "integrate",
    "integrate_past",
    "jacobian",
    "loss",
    "moments",
    "plateaus",
    "rhs",
]


# -- helpers ----------------------------------------------------------------------------------
def eigenbasis(Lambda) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues in descending order and the matching eigenvectors (columns).

    Parameters
    ----------
    Lambda : array_like or Moments
        Covariance matrix, list of eigenvalues, or :func:`moments`.

    Returns
    -------
    lam : ndarray (D,)
        ``lambda_1 >= ... >= lambda_D``.
    E : ndarray (D, D)
        Column ``d`` is ``e_{d+1}`` (sign arbitrary).
    """
    if isinstance(Lambda, Moments):
        Lam = Lambda.Lambda
    else:
        from theory.params import covariance

        Lam = covariance("Lambda", "").validate(Lambda, {})
    lam, E = np.linalg.eigh(Lam)
    return lam[::-1].copy(), E[:, ::-1].copy()


def _params(v, k, q, D: int | None = None):
    v = np.asarray(v, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"v: expected a vector of H value weights, got shape {v.shape}")
    if k.ndim != 3 or k.shape[0] != v.shape[0]:
        raise ValueError(f"k: expected shape (H, R, D) with H = {v.shape[0]}, got {k.shape}")
    if q.shape != k.shape:
        raise ValueError(f"q: expected the shape of k {k.shape}, got {q.shape}")
    if D is not None and k.shape[2] != D:
        raise ValueError(f"k: expected D = {D} from Lambda, got vectors of length {k.shape[2]}")
    if not (np.all(np.isfinite(v)) and np.all(np.isfinite(k)) and np.all(np.isfinite(q))):
        raise ValueError("v: parameters contain NaN or infinity")
    return v, k, q


def _pack(v, k, q) -> np.ndarray:
    return np.concatenate([v, k.ravel(), q.ravel()])


def _unpack(y: np.ndarray, H: int, R: int, D: int):
    """``y`` of shape (..., H + 2 H R D) -> v (..., H), k, q (..., H, R, D)."""
    n = H * R * D
    lead = y.shape[:-1]
    return (y[..., :H], y[..., H:H + n].reshape(lead + (H, R, D)),
            y[..., H + n:].reshape(lead + (H, R, D)))


# -- initialisations --------------------------------------------------------------------------
def init_separate(rng: np.random.Generator, H: int, R: int, D: int, w_init: float):
    """Random initialisation of eq. 36 (App. C.2).

    ``v_i ~ N(0, w_init^2 / H)``, ``k_ir^d, q_ir^d ~ N(0, w_init^2 / (H R D))``, so that
    ``E sum_i v_i^2 = E sum ||k_ir||^2 = E sum ||q_ir||^2 = w_init^2`` (eq. 37).

    Parameters
    ----------
    rng : numpy.random.Generator
    H, R, D : int
        Heads, rank of each head's key/query, token dimension.
    w_init : float
        Initialisation scale (> 0).

    Returns
    -------
    v : ndarray (H,)
    k, q : ndarray (H, R, D)
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    H, R, D = validate.integer("H", H), validate.integer("R", R), validate.integer("D", D)
    w_init = validate.positive("w_init", w_init)
    v = rng.normal(0.0, w_init / np.sqrt(H), size=H)
    s = w_init / np.sqrt(H * R * D)
    k = rng.normal(0.0, s, size=(H, R, D))
    q = rng.normal(0.0, s, size=(H, R, D))
    return v, k, q


def init_aligned_separate(Lambda, H: int, R: int, w_init, sigma=None):
    """Balanced, aligned start: ``k_i1 = q_i1 = v_i e_{sigma(i)}``, ``v_i = w_init``.

    On this manifold (distinct ``sigma(i)``) every head obeys its own copy of the scalar
    ODE eq. 21 exactly and at the same time; the conserved quantities of
    eq. 82/88 vanish. Pieces ``r >= 2`` are zero.

    Parameters
    ----------
    Lambda : array_like or Moments
    H, R : int
        Heads (``H <= D``) and rank.
    w_init : float or array_like (H,)
        ``v_i(0)`` (> 0), one value for all heads or one per head.
    sigma : sequence of int, optional
        1-based eigenvector index (descending eigenvalues) of each head, distinct; default
        ``1..H``.

    Returns
    -------
    v : ndarray (H,)
    k, q : ndarray (H, R, D)
    """
    lam, E = eigenbasis(Lambda)
    D = lam.size
    H, R = validate.integer("H", H), validate.integer("R", R)
    if H > D:
        raise ValueError(f"H: the aligned start needs H <= D = {D} distinct eigenvectors, got {H}")
    w = np.broadcast_to(np.asarray(w_init, dtype=np.float64), (H,)) if np.ndim(w_init) == 0 \
        else np.asarray(w_init, dtype=np.float64)
    if w.shape != (H,) or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(f"w_init: expected a positive number or {H} positive numbers, got {w_init!r}")
    s = np.arange(1, H + 1) if sigma is None else np.asarray(sigma)
    if (s.shape != (H,) or len(set(s.tolist())) != H or np.any(s < 1) or np.any(s > D)
            or not np.issubdtype(s.dtype, np.integer)):
        raise ValueError(f"sigma: expected {H} distinct integers in 1..{D}, got {sigma!r}")
    v = w.copy()
    k = np.zeros((H, R, D))
    k[:, 0, :] = v[:, None] * E[:, s - 1].T
    return v, k, k.copy()


# -- the flow ---------------------------------------------------------------------------------
def effective_matrix(v, k, q) -> np.ndarray:
    """``M = sum_{i,r} v_i k_ir q_ir^T``; vectorised over leading axes
    (``v (..., H)``, ``k, q (..., H, R, D)``)."""
    return np.einsum("...i,...ird,...ire->...de", np.asarray(v, float), np.asarray(k, float),
                     np.asarray(q, float))


def gradients(Lambda, N, v, k, q, tau: float = 1.0):
    """``(tau^-1 k^T G q summed over r, tau^-1 v G q, tau^-1 v G^T k)`` (eqs. 14, 83).

    Returns the time derivatives ``dv/dt (H,)``, ``dk/dt, dq/dt (H, R, D)``.
    """
    mo = _as_moments(Lambda, N)
    v, k, q = _params(v, k, q, mo.D)
    tau = validate.positive("tau", tau)
    G = (mo.L2 - mo.A @ effective_matrix(v, k, q) @ mo.Lambda) / tau
    Gq = q @ G.T                                  # (H, R, D): G q_ir
    dv = np.einsum("ird,ird->i", k, Gq)
    dk = v[:, None, None] * Gq
    dq = v[:, None, None] * (k @ G)               # G^T k_ir
    return dv, dk, dq


def _flow_constants(Lambda, N, H, R, tau):
    """``(moments, H, R, C, l2)``: the validated sizes and ``vec_C(G) = l2 - C vec_C(M)``
    (:func:`verify.flows.merged._vec_gradient`)."""
    mo = _as_moments(Lambda, N)
    H, R = validate.integer("H", H), validate.integer("R", R)
    C, l2 = _vec_gradient(mo, validate.positive("tau", tau))
    return mo, H, R, C, l2


def rhs(Lambda, N, H: int, R: int = 1, tau: float = 1.0) -> Callable[[float, np.ndarray], np.ndarray]:
    """Right-hand side ``f(t, y)`` on the flat state ``y = [v, k.ravel(), q.ravel()]``.

    ``k.ravel()``, ``q.ravel()`` are numpy's C order of the (H, R, D) arrays.
    Cost per call O(H R D^2 + D^4), in about ten numpy calls (at D = 3-8 the cost of a call, not
    its arithmetic, is what counts: ``G`` is one ``D^2 x D^2`` product with ``vec M``; the products
    are ``ndarray.dot``, the same BLAS calls as ``@`` with less overhead per call: the same values,
    in about 15 % less time).
    """
    mo, H, R, C, l2 = _flow_constants(Lambda, N, H, R, tau)
    D = mo.D
    P, n = H * R, H * R * D
    Hn = H + n
    C_dot, subtract, empty_like, vecdot, multiply, matmul = C.dot, np.subtract, np.empty_like, np.vecdot, \
        np.multiply, np.matmul

    def f(t, y):
        vr = y[:H, None] if R == 1 else y[:H].repeat(R)[:, None]        # the value weight of each piece (i, r)
        K = y[H:Hn].reshape(P, D)
        Q = y[Hn:].reshape(P, D)
        Kv = K * vr
        G = subtract(l2, C_dot(Kv.T.dot(Q).ravel())).reshape(D, D)      # M = sum_p v k_p q_p^T
        QGt = Q.dot(G.T)                                                # rows G q_p
        out = empty_like(y)
        dv = vecdot(K, QGt)                                             # k_p^T G q_p
        out[:H] = dv if R == 1 else dv.reshape(H, R).sum(1)
        multiply(QGt, vr, out=out[H:Hn].reshape(P, D))
        matmul(Kv, G, out=out[Hn:].reshape(P, D))                       # v G^T k_p
        return out

    return f


def jacobian(Lambda, N, H: int, R: int = 1, tau: float = 1.0) -> Callable[[float, np.ndarray], np.ndarray]:
    """Jacobian ``J(t, y) = d f / d y`` of :func:`rhs` (dense, ``n x n``, ``n = H + 2 H R D``; symmetric,
    ``f`` being ``-1/2`` the gradient of a loss).

    ``f = J_M^T vec G`` with ``J_M = d vec M / d y``, so ``J = -J_M^T C J_M + sum_ab G_ab d^2 M_ab / dy^2``.
    Every column of ``J_M`` is (a sum over ``r`` of) ``vec(x y^T)``: ``k_ir q_ir^T`` for ``v_i``,
    ``v_i e_a q_ir^T`` for ``k_ir^a``, ``v_i k_ir e_b^T`` for ``q_ir^b``; and ``<vec(x y^T), C vec(x' y'^T)>
    = (x^T A x') (y^T Lambda y') / tau``, so the first term is the Hadamard product ``-(X A X^T) * (Y Lambda
    Y^T) / tau`` of two small Gram matrices. The second couples ``v_i`` with ``k_ir`` (``G q_ir``) and
    ``q_ir`` (``G^T k_ir``), and ``k_ir`` with ``q_ir`` (``v_i G``).

    Given to the implicit solvers (LSODA's stiff phase, Radau, BDF) in place of finite differences,
    which cost ``n`` evaluations of ``f`` each.
    """
    mo, H, R, C, l2 = _flow_constants(Lambda, N, H, R, tau)
    D = mo.D
    P, n = H * R, H * R * D
    size = H + 2 * n
    A, Lam = mo.A, mo.Lambda / float(tau)
    p, a, b = (x.ravel() for x in np.meshgrid(np.arange(P), np.arange(D), np.arange(D), indexing="ij"))
    k_a, q_b = H + p * D + a, H + n + p * D + b          # entries (k_{p,a}, q_{p,b}) of one piece
    v_p, k_pc = np.repeat(np.arange(P) // R, D), H + np.arange(n)     # (v_i, k_{p,c}), p in head i
    q_pc = k_pc + n
    eye = np.eye(D)

    def jac(t, y):
        v = y[:H]
        vr = v if R == 1 else np.repeat(v, R)
        K = y[H:H + n].reshape(P, D)
        Q = y[H + n:].reshape(P, D)
        G = np.subtract(l2, C @ ((K * vr[:, None]).T @ Q).ravel()).reshape(D, D)
        E = (vr[:, None, None] * eye).reshape(n, D)       # rows v_p e_c
        X = np.concatenate([K, E, np.repeat(K, D, axis=0)])
        Y = np.concatenate([Q, np.repeat(Q, D, axis=0), E])
        J = (X @ A) @ X.T
        J *= (Y @ Lam) @ Y.T
        np.negative(J, out=J)
        if R > 1:                                          # v_i's column is the sum over its R pieces
            J = np.concatenate([J[:P].reshape(H, R, -1).sum(1), J[P:]])
            J = np.concatenate([J[:, :P].reshape(size, H, R).sum(2), J[:, P:]], axis=1)
        GQ, GK = (Q @ G.T).ravel(), (K @ G).ravel()
        J[v_p, k_pc] += GQ
        J[k_pc, v_p] += GQ
        J[v_p, q_pc] += GK
        J[q_pc, v_p] += GK
        kq = vr[p] * G[a, b]
        J[k_a, q_b] += kq
        J[q_b, k_a] += kq
        return J

    return jac


@dataclass
class SeparateFlowResult:
    """A trajectory of the separate model.

    Attributes
    ----------
    t : ndarray (T,)
    v : ndarray (T, H)
    k, q : ndarray (T, H, R, D)
    M : ndarray (T, D, D)
        ``sum v_i k_ir q_ir^T``.
    loss : ndarray (T,)
        Population loss ``L(M(t))``.
    sol : callable or None
        Dense output on the flat state (``dense=True``).
    nfev : int
    """

    t: np.ndarray
    v: np.ndarray
    k: np.ndarray
    q: np.ndarray
    M: np.ndarray
    loss: np.ndarray
    sol: Callable | None = None
    nfev: int = 0
    moments: Moments | None = None

    def at(self, t):
        """``(v, k, q)`` at time(s) ``t`` from the dense output (needs ``dense=True``)."""
        if self.sol is None:
            raise ValueError("t: no dense output; integrate with dense=True")
        H, R, D = self.k.shape[1:]
        return _unpack(np.asarray(self.sol(t)).T, H, R, D)

    def loss_at(self, t) -> np.ndarray:
        """Population loss at time(s) ``t`` from the dense output."""
        v, k, q = self.at(t)
        return loss(self.moments, None, effective_matrix(v, k, q))


def integrate(Lambda, N, v0, k0, q0, *, tau: float = 1.0, t_eval, rtol: float = 1e-10,
              atol: float | None = None, method: str = "DOP853", dense: bool = False,
              stop_loss: float | None = None) -> SeparateFlowResult:
    """Integrate the exact gradient flow (eq. 14 / 83, reduced form) from ``(v0, k0, q0)``.

    Parameters
    ----------
    Lambda : array_like or Moments
    N : int
        Context length.
    v0 : array_like (H,)
    k0, q0 : array_like (H, R, D)
    tau : float
        Time constant of eq. 5.
    t_eval : array_like (T,)
        Non-decreasing output times >= 0; the flow starts at ``t = 0``.
    rtol : float
    atol : float, optional
        Default ``1e-12 * min(1, max|y0|)^3``: far below the parameter scale even for tiny
        initialisations (the plateau dynamics are cubic in the weights).
    method : str
        ``solve_ivp`` method.
    dense : bool
        Keep the dense output.
    stop_loss : float, optional
        End the solve where the loss first falls to this level (a terminal event): the result
        then holds only the times of ``t_eval`` up to there. The steps up to there are those of
        the whole solve (the interval is still ``[0, t_eval[-1]]``), so every number read from
        the part kept is the same; a check that needs a later time integrates without it.

    Returns
    -------
    SeparateFlowResult
    """
    mo = _as_moments(Lambda, N)
    v0, k0, q0 = _params(v0, k0, q0, mo.D)
    tau = validate.positive("tau", tau)
    rtol = validate.positive("rtol", rtol)
    t_eval = validate.times("t_eval", t_eval)
    H, R, D = k0.shape
    y0 = _pack(v0, k0, q0)
    if atol is None:
        scale = min(1.0, float(np.max(np.abs(y0))))
        atol = 1e-12 * scale**3 if scale > 0 else 1e-300
    atol = validate.positive("atol", atol)
    f = rhs(mo, None, H, R, tau)
    stop = None
    if stop_loss is not None:
        level = float(stop_loss)
        if not np.isfinite(level):
            raise ValueError(f"stop_loss: expected a finite loss level, got {stop_loss!r}")

        def stop(t, y):
            return float(loss(mo, None, effective_matrix(*_unpack(y, H, R, D)))) - level
    Y, sol, nfev = solve(f, y0, t_eval, method=method, rtol=rtol, atol=atol, dense=dense,
                         jac=jacobian(mo, None, H, R, tau), stop=stop)
    v, k, q = _unpack(Y, H, R, D)
    M = effective_matrix(v, k, q)
    return SeparateFlowResult(t=t_eval[:Y.shape[0]].copy(), v=v, k=k, q=q, M=M, loss=loss(mo, None, M),
                              sol=sol, nfev=nfev, moments=mo)


def integrate_past(Lambda, N, v0, k0, q0, *, level: float, stop_loss: float, t_eval, **kwargs) -> SeparateFlowResult:
    """:func:`integrate` for a check that reads the flow only until the loss crosses ``level``: the solve
    stops where the loss reaches ``stop_loss`` (below ``level``; ``integrate``'s ``stop_loss``, so what is
    kept is the whole solve's), or runs to ``t_eval[-1]`` when no output time before the stop has the loss
    at or below ``level`` (the crossing then lies between the last output time and the stop).
    ``kwargs`` go to :func:`integrate`."""
    if not float(stop_loss) < float(level):
        raise ValueError(f"stop_loss: expected a level below level = {level!r}, got {stop_loss!r}")
    res = integrate(Lambda, N, v0, k0, q0, t_eval=t_eval, stop_loss=stop_loss, **kwargs)
    if res.t.size < np.size(t_eval) and not np.any(res.loss <= level):
        res = integrate(Lambda, N, v0, k0, q0, t_eval=t_eval, **kwargs)
    return res


# -- conservation laws ------------------------------------------------------------------------
def conserved(v, k, q) -> tuple[np.ndarray, np.ndarray]:
    """Conserved quantities of eqs. 82 (rank one) and 88 (rank R).

    Returns
    -------
    kq : ndarray (..., H, R)
        ``||k_ir||^2 - ||q_ir||^2``.
    kv : ndarray (..., H)
        ``sum_r ||k_ir||^2 - v_i^2``.

    Vectorised over leading axes; constant along the exact flow for any loss of ``yhat``
    of the form (S), since ``k . d/dk = q . d/dq = v d/dv`` on ``yhat``.
    """
    v = np.asarray(v, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if k.shape != q.shape or k.ndim < 3:
        raise ValueError(f"q: expected the shape of k (..., H, R, D), got k {k.shape}, q {q.shape}")
    if v.shape != k.shape[:-2]:
        raise ValueError(f"v: expected shape {k.shape[:-2]} to match k {k.shape}, got {v.shape}")
    kk = np.sum(k * k, axis=-1)
    return kk - np.sum(q * q, axis=-1), kk.sum(axis=-1) - v * v


# -- plateaus and drops -----------------------------------------------------------------------
def first_crossing(t, curve, level: float, func: Callable[[float], float] | None = None) -> float:
    """First time at which ``curve`` crosses ``level``.

    Linear interpolation between the bracketing samples, or, when ``func(t) -> value`` is
    given (e.g. :meth:`SeparateFlowResult.loss_at`), ``brentq`` on it inside the bracket to
    ``xtol = 1e-12`` relative to the time.
    """
    t = np.asarray(t, dtype=np.float64)
    c = np.asarray(curve, dtype=np.float64) - float(level)
    if t.ndim != 1 or c.shape != t.shape or t.size < 2:
        raise ValueError(f"curve: expected the shape of t {t.shape} with >= 2 samples, got {c.shape}")
    if c[0] == 0:
        return float(t[0])
    idx = np.nonzero(np.sign(c) != np.sign(c[0]))[0]
    if idx.size == 0:
        raise ValueError(f"level: the curve never crosses {level!r}")
    j = int(idx[0])
    if func is None:
        return float(t[j - 1] + (0 - c[j - 1]) * (t[j] - t[j - 1]) / (c[j] - c[j - 1]))
    from scipy.optimize import brentq

    return float(brentq(lambda s: float(func(s)) - level, t[j - 1], t[j],
                        xtol=1e-12 * max(1.0, abs(t[j])), rtol=4 * np.finfo(float).eps))


@dataclass
class Plateaus:
    """Plateau statistics of a loss curve against predicted levels ``L_0 > L_1 > ...``.

    Attributes
    ----------
    drop_times : ndarray (m,)
        ``drop_times[j]``: first crossing of ``(L_j + L_{j+1}) / 2`` (NaN if never reached).
    time_near : ndarray (m + 1,)
        Time spent with ``|L(t) - L_j| <= band * (gap around L_j)``.
    flattest : ndarray (m + 1,)
        Index into ``t`` of the flattest sample of each plateau (least ``|dL/dt|``, finite
        differences) between consecutive drops; the last is the final sample.
    level_at_flattest : ndarray (m + 1,)
        ``loss[flattest]``: the measured plateau levels.
    """

    drop_times: np.ndarray
    time_near: np.ndarray
    flattest: np.ndarray
    level_at_flattest: np.ndarray


def plateaus(t, curve, levels, band: float = 0.02, func: Callable[[float], float] | None = None) -> Plateaus:
    """Time spent near each predicted level, drop times, and the measured plateau levels.

    Parameters
    ----------
    t : array_like (T,)
        Increasing times.
    curve : array_like (T,)
        The loss, decreasing from near ``levels[0]``.
    levels : array_like (m + 1,)
        Predicted plateau levels, strictly decreasing (e.g. ``L(M_0..M_D)``, eq. 19).
    band : float
        Half-width of the "near" band as a fraction of the smaller neighbouring gap.
    func : callable, optional
        ``func(t) -> loss`` to refine the drop times (see :func:`first_crossing`).
    """
    t = np.asarray(t, dtype=np.float64)
    c = np.asarray(curve, dtype=np.float64)
    lv = np.asarray(levels, dtype=np.float64)
    if t.ndim != 1 or c.shape != t.shape or t.size < 3 or np.any(np.diff(t) <= 0):
        raise ValueError("t: expected increasing times with the shape of curve (>= 3 samples)")
    if lv.ndim != 1 or lv.size < 2 or np.any(np.diff(lv) >= 0):
        raise ValueError(f"levels: expected >= 2 strictly decreasing levels, got {levels!r}")
    band = validate.positive("band", band)
    n = lv.size
    drops = np.full(n - 1, np.nan)
    for j in range(n - 1):
        mid = 0.5 * (lv[j] + lv[j + 1])
        if np.any(c <= mid):
            drops[j] = first_crossing(t, c, mid, func)
    gaps = -np.diff(lv)
    near = np.empty(n)
    dt = np.diff(t)
    for j in range(n):
        g = min(gaps[max(j - 1, 0)], gaps[min(j, n - 2)])
        inside = np.abs(c - lv[j]) <= band * g
        near[j] = float(np.sum(dt * (inside[1:] & inside[:-1])))
    slope = np.abs(np.gradient(c, t))
    flat = np.empty(n, dtype=int)
    edges = np.concatenate([[t[0]], drops, [t[-1]]])
    for j in range(n):
        lo, hi = edges[j], edges[j + 1]
        if j == n - 1 or not np.isfinite(hi) or not np.isfinite(lo):
            flat[j] = t.size - 1 if j == n - 1 else -1
            continue
        sel = np.nonzero((t >= lo) & (t <= hi))[0]
        flat[j] = int(sel[np.argmin(slope[sel])]) if sel.size else -1
    level = np.where(flat >= 0, c[np.maximum(flat, 0)], np.nan)
    return Plateaus(drop_times=drops, time_near=near, flattest=flat, level_at_flattest=level)


# -- the learned weights against the minimal-norm factorisation (eqs. 20a, 80-81) ----------------
def deviations(v, k, q, E, v_star):
    """Deviations of final rank-one weights from the minimal-norm factorisation (eqs. 80, 81).

    Parameters
    ----------
    v : ndarray (H,)
    k, q : ndarray (H, D)
    E : ndarray (D, D)
        Eigenvectors (columns, descending eigenvalues).
    v_star : ndarray (D,)
        ``(lambda_d / a_d)^{1/3}``.

    Returns
    -------
    dict with ``heads`` (head of each direction, by the largest ``|v (e.k)(e.q)|``),
    ``weights`` (max over d of ``| |v|, ||k||, ||q|| - v*_d |``), ``norm_excess``
    (``sum v^2 + |k|^2 + |q|^2 - 3 sum v*^2``), ``misalignment`` (max ``1 - |cos|`` of k and q
    with ``e_d``), ``off_head`` (largest ``|v (e_d.k)(e_d.q)|`` of the other heads).
    """
    v, k, q = (np.asarray(x, dtype=np.float64) for x in (v, k, q))
    v_star = np.asarray(v_star, dtype=np.float64)
    if k.ndim != 2 or k.shape != q.shape or v.shape != (k.shape[0],):
        raise ValueError(f"k: expected (H, D) with q of the same shape and v (H,), got {k.shape}, {q.shape}, {v.shape}")
    D = k.shape[1]
    if E.shape != (D, D) or v_star.shape != (D,):
        raise ValueError(f"E: expected ({D}, {D}) and v_star ({D},), got {E.shape}, {v_star.shape}")
    c = v[:, None] * (k @ E) * (q @ E)
    heads = np.argmax(np.abs(c), axis=0)
    nk, nq = np.linalg.norm(k, axis=1), np.linalg.norm(q, axis=1)
    w_dev, mis, off = 0.0, 0.0, 0.0
    for d, i in enumerate(heads):
        w_dev = max(w_dev, abs(abs(v[i]) - v_star[d]), abs(nk[i] - v_star[d]), abs(nq[i] - v_star[d]))
        mis = max(mis, 1 - abs(k[i] @ E[:, d]) / nk[i], 1 - abs(q[i] @ E[:, d]) / nq[i])
        off = max(off, float(np.max(np.abs(np.delete(c[:, d], i)))))
    excess = float(np.sum(v**2) + np.sum(k**2) + np.sum(q**2) - 3 * np.sum(v_star**2))
    return {"heads": heads.tolist(), "distinct": len(set(heads.tolist())) == D, "weights": float(w_dev),
            "norm_excess": excess, "misalignment": float(mis), "off_head": off}


def rotated_pair(v, k, q, i, j, angle):
    """Balanced non-minimal factorisation: ``v_i^{3/2} k_i/|k_i|``, ``v_j^{3/2} ...`` rotated
    by ``angle`` in their span; each head set to ``k = q = u xi``, ``v = u = |b|^{2/3}``.
    Keeps ``v_i k_i q_i^T + v_j k_j q_j^T`` when ``k = q`` per head and ``v > 0``."""
    v, k, q = v.copy(), k.copy(), q.copy()
    B = np.stack([np.sign(v[h]) * abs(v[h]) ** 1.5 * k[h] / np.linalg.norm(k[h]) for h in (i, j)], axis=1)
    c, s = np.cos(angle), np.sin(angle)
    B = B @ np.array([[c, -s], [s, c]])
    for col, h in enumerate((i, j)):
        nb = np.linalg.norm(B[:, col])
        u = nb ** (2 / 3)
        v[h], k[h], q[h] = u, u * B[:, col] / nb, u * B[:, col] / nb
    return v, k, q
