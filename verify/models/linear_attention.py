"""Torch models of merged key-query linear attention and its cubic-feature twin.

Zhang, Singh, Latham, Saxe 2025 (ICML), *Training Dynamics of In-Context Learning in
Linear Attention*, §2-3 and App. D.

The in-context regression sequence is the token matrix (eq. 1)

    X = [[x_1 ... x_N  x_q],
         [y_1 ... y_N  0  ]]  in R^{(D+1) x (N+1)},

tokens are columns and the query's label slot is 0. The multi-head merged linear
attention (§2.3) is

    ATTN_M(X) = X + sum_i (1/N) W^V_i X X^T W^KQ_i X,

with ``rho = N`` the number of *context* tokens, and the prediction is the bottom-right
entry ``yhat = ATTN_M(X)[D, N]`` (0-based; eq. 3). With the blocks::

    W^V_i  = [[*,     *  ],        W^KQ_i = [[U_i,   *],
              [v_i^T, v_i]],                  [u_i^T, *]]

and ``v_i = u_i = 0`` the prediction is ``yhat = beta^T M x_q`` with ``beta = (1/N)
sum_n y_n x_n`` and the effective matrix ``M = sum_i v_i U_i`` (eq. M, eq. 4), which is the
two-layer linear network ``yhat = w2^T W1 z`` on the cubic feature ``z = vec(beta x_q^T)
= x_q (x) beta`` (column-major vec, eqs. 6-7, 42): :class:`CubicFeatureMLP`.

Contents
--------
MergedLinearAttention   the full attention layer, every block of W^V_i, W^KQ_i trainable
CubicFeatureMLP         yhat = w2^T W1 z, eqs. 6-7
cubic_features          z = vec(beta x_q^T) from token matrices
sample_tokens           x_n, x_q ~ N(0, Lambda), w ~ N(0, I): token matrices and y_q (eqs. 1-2)
standard_normal         Gaussian draws in float32, cast (the sampler's fast path)
train_online_sgd        online SGD on fresh batches, population loss of M logged (t/tau = 2 eta k)
benchmark_steps         SGD steps per second of the attention model

Everything is float64 by default. Randomness comes only from an explicit
``torch.Generator``.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple

import numpy as np
import torch
from torch import nn

from .. import validate

__all__ = ["MergedLinearAttention", "CubicFeatureMLP", "TokenBatch", "TrainResult", "next_token_predictions",
           "next_token_population_loss", "cpu_threads", "cubic_features", "sample_tokens", "sgd_step",
           "standard_normal", "train_online_sgd", "benchmark_steps", "validate_covariance"]

DTYPE = torch.float64


def validate_covariance(Lambda) -> np.ndarray:
    """``Lambda`` as a float64 (D, D) SPD array (a list of eigenvalues means a diagonal).

    Uses the same rules as the closed forms' ``covariance`` parameters; raises
    ``ValueError`` starting with ``Lambda``.
    """
    return validate.covariance("Lambda", Lambda)


def _as_tokens(X, D: int | None = None) -> torch.Tensor:
    if not isinstance(X, torch.Tensor):
        raise ValueError("X: expected a torch.Tensor of shape (B, D+1, N+1), "
                         f"got {type(X).__name__}")
    if X.ndim != 3 or X.shape[-1] < 2:
        raise ValueError(f"X: expected shape (B, D+1, N+1) with N >= 1, got {tuple(X.shape)}")
    if D is not None and X.shape[1] != D + 1:
        raise ValueError(f"X: expected {D + 1} rows (D = {D}), got shape {tuple(X.shape)}")
    return X


@contextlib.contextmanager
def cpu_threads(n: int | None):
    """Run a block with ``torch.set_num_threads(n)`` (restored afterwards); None: unchanged.

    The matrices here are tiny ((D+1) x (D+1) per sequence): one thread avoids OpenMP
    synchronisation, which costs far more than the arithmetic (over an order of magnitude
    on a busy 2-core machine).
    """
    if n is None:
        yield
        return
    n = validate.integer("threads", n)
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


# -- data ---------------------------------------------------------------------------------
class TokenBatch(NamedTuple):
    """A batch of in-context regression sequences.

    Attributes
    ----------
    X : Tensor, shape (B, D+1, N+1)
        Token matrices (eq. 1): columns ``(x_n, y_n)``, last column ``(x_q, 0)``.
    y_q : Tensor, shape (B,)
        Query targets ``w^T x_q``.
    w : Tensor, shape (B, D)
        The task vectors.
    """

    X: torch.Tensor
    y_q: torch.Tensor
    w: torch.Tensor


def standard_normal(shape: tuple, generator: torch.Generator, device, dtype) -> torch.Tensor:
    """Standard Gaussian draws of ``shape`` in ``dtype``, drawn in float32 and cast.

    torch's CPU sampler takes about 14 ns per float64 number and 2.5 ns per float32 one, and the
    draws were the largest single cost of an online-SGD step. The cast numbers are N(0, 1) to
    float32 resolution (relative spacing 6e-8), far below any statistic the checks resolve;
    everything after the draw runs in ``dtype``."""
    draw = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
    return draw if dtype == torch.float32 else draw.to(dtype)


def sample_tokens(Lambda, N: int, batch: int, *, generator: torch.Generator,
                  device=None, dtype=DTYPE, chol: torch.Tensor | None = None,
                  w_star=None, fixed: float = 0.0) -> TokenBatch:
    """Draw ``batch`` sequences of the data model (§2.1, eqs. 1-2).

    ``x_1..x_N, x_q ~ N(0, Lambda)`` i.i.d. (through the Cholesky factor of ``Lambda``),
    ``w ~ N(0, I_D)``, ``y_n = w^T x_n``, ``y_q = w^T x_q``, no label noise. The standard
    Gaussians are drawn in float32 and cast (:func:`standard_normal`). With ``w_star`` and
    ``fixed = p`` the first ``round(p * batch)`` sequences take the task vector ``w_star`` instead
    (App. G, Fig. 14); the same draws are made either way, so a seed gives the same inputs.

    Parameters
    ----------
    Lambda : array_like
        D x D SPD covariance or a list of D positive eigenvalues.
    N : int
        Context length (labelled tokens before the query).
    batch : int
        Number of sequences B.
    generator : torch.Generator
        Source of randomness; its device is used unless ``device`` is given.
    device, dtype
        Where and in which precision to build the tensors (default float64).
    chol : Tensor, optional
        A precomputed lower Cholesky factor of ``Lambda`` on ``device`` (skips validation).
    w_star : array_like, shape (D,), optional
        The fixed task vector of App. G.
    fixed : float
        The portion of the batch in ``[0, 1]`` whose task vector is ``w_star`` (needs ``w_star``
        when positive).

    Returns
    -------
    TokenBatch
        ``X`` (B, D+1, N+1) with the query label 0, ``y_q`` (B,), ``w`` (B, D).
    """
    N = validate.integer("N", N)
    batch = validate.integer("batch", batch)
    generator = validate.generator(generator)
    fixed = validate.probability("fixed", fixed)
    if fixed > 0 and w_star is None:
        raise ValueError("w_star: a positive fixed portion needs the fixed task vector w_star")
    device = torch.device(device) if device is not None else generator.device
    if chol is None:
        lam = validate_covariance(Lambda)
        chol = torch.as_tensor(np.linalg.cholesky(lam), dtype=dtype, device=device)
    return _draw_tokens(N, batch, generator, device, dtype, chol, *_fixed_tasks(w_star, fixed, batch, chol))


def _fixed_tasks(w_star, fixed: float, batch: int, chol: torch.Tensor) -> tuple[torch.Tensor | None, int]:
    """``(w_fixed, n_fixed)``: App. G's fixed task vector as a tensor like ``chol`` and how many
    sequences of a batch take it (``round(fixed * batch)``; ``(None, 0)`` when none do)."""
    n_fixed = int(round(fixed * batch))
    return (_as_param_tensor("w_star", w_star, (chol.shape[0],), chol) if n_fixed else None), n_fixed


def _draw_tokens(N: int, batch: int, generator, device, dtype, chol: torch.Tensor,
                 w_fixed: torch.Tensor | None, n_fixed: int) -> TokenBatch:
    """:func:`sample_tokens` on validated arguments (the online-SGD loop's path): the first ``n_fixed``
    sequences take the task vector ``w_fixed``."""
    return _draw_token_variants(N, batch, generator, device, dtype, chol, w_fixed, (n_fixed,))[0]


def _draw_token_variants(N: int, batch: int, generator, device, dtype, chol: torch.Tensor,
                         w_fixed: torch.Tensor | None, n_fixed: tuple) -> list[TokenBatch]:
    """One draw of inputs and task vectors, and for each entry ``n`` of ``n_fixed`` the batch whose first ``n``
    sequences take the task vector ``w_fixed`` (equal entries share one batch): each what :func:`_draw_tokens`
    gives from the same generator state, drawn once."""
    D = chol.shape[0]
    g = standard_normal((batch, N + 1, D), generator, device, dtype)
    # columns ~ N(0, Lambda): one matrix product over all tokens (an einsum took 7x longer on a CPU)
    xT = (g @ chol.mT).mT                            # (B, D, N+1)
    w0 = standard_normal((batch, D), generator, device, dtype)
    made, first = {}, None
    for n in n_fixed:
        if n in made:
            continue
        w = w0.clone() if n and len(n_fixed) > 1 else w0
        if n:
            w[:n] = w_fixed
        if first is None:
            X = torch.empty((batch, D + 1, N + 1), dtype=dtype, device=device)
            X[:, :D].copy_(xT)
            # the labels y_n = w^T x_n into the last row (a strided sum took 5x longer than the batched product)
            torch.bmm(w.unsqueeze(1), xT, out=X[:, D:])
            y_q = X[:, D, N].clone()
            X[:, D, N] = 0.0                                 # the query's label slot
            first = made[n] = TokenBatch(X, y_q, w)
            n_first = n
            continue
        # a further portion: the first batch with the labels of the sequences whose task vector differs
        lo, hi = sorted((n, n_first))
        X, y_q = first.X.clone(), first.y_q.clone()
        y = torch.bmm(w[lo:hi].unsqueeze(1), xT[lo:hi]).squeeze(1)
        y_q[lo:hi] = y[:, N]
        y[:, N] = 0.0
        X[lo:hi, D] = y
        made[n] = TokenBatch(X, y_q, w)
    return [made[n] for n in n_fixed]


def cubic_features(X: torch.Tensor, order: str = "F") -> torch.Tensor:
    """The cubic feature ``z = vec(beta x_q^T)`` of token matrices (eqs. 4, 7, 42).

    ``beta = (1/N) sum_n y_n x_n`` over the N context columns; ``x_q`` is the last column.

    Parameters
    ----------
    X : Tensor, shape (B, D+1, N+1)
    order : {"F", "C"}
        ``"F"`` (the paper's column-major vec): ``z = x_q (x) beta``, entry ``j*D + i`` is
        ``beta_i x_{q,j}``. ``"C"`` (row-major, the wrong convention; for negative
        controls): ``z = beta (x) x_q``.

    Returns
    -------
    Tensor, shape (B, D*D)
    """
    X = _as_tokens(X)
    if order not in ("F", "C"):
        raise ValueError(f"order: expected 'F' or 'C', got {order!r}")
    D, N = X.shape[1] - 1, X.shape[2] - 1
    x, y = X[:, :D, :N], X[:, D, :N]
    beta = (x * y.unsqueeze(1)).sum(-1) / N          # (B, D)
    x_q = X[:, :D, N]
    outer = x_q.unsqueeze(2) * beta.unsqueeze(1) if order == "F" else \
        beta.unsqueeze(2) * x_q.unsqueeze(1)
    return outer.reshape(X.shape[0], D * D)


# -- models -------------------------------------------------------------------------------
class MergedLinearAttention(nn.Module):
    """Multi-head merged key-query linear attention on full token matrices (§2.3).

    ``ATTN_M(X) = X + sum_i (1/rho) W^V_i X X^T W^KQ_i X`` with ``rho = N`` (context
    tokens only), per head full ``(D+1) x (D+1)`` matrices ``W^V_i`` and ``W^KQ_i``, all
    entries trainable. The prediction is ``ATTN_M(X)[D, N]`` (eq. 3, 0-based).

    Parameters
    ----------
    D : int
        Token dimension (the label adds one row).
    H : int
        Number of heads.
    N : int
        Context length the layer is built for; ``rho = N`` by default.
    rho : float, optional
        The normaliser; only for negative controls (e.g. ``N + 1``, counting the query).
    softmax : bool
        Softmax attention over the keys of ``X^T W^KQ_i X`` (no ``1/rho``) instead of the linear
        map (the softmax ATTN_M of §2.2 / Fig. 5a); the effective matrix then does not describe
        the function.
    dtype, device
        Parameter precision (float64) and device.

    Attributes
    ----------
    WV, WKQ : Parameter, shape (H, D+1, D+1)
        The value and merged key-query matrices of all heads, zero until
        :meth:`init_` or :meth:`load_`.

    Notes
    -----
    Blocks (0-based): ``v_i = WV[i, D, D]`` (scalar), ``v_i`` vector ``= WV[i, D, :D]``,
    ``U_i = WKQ[i, :D, :D]``, ``u_i = WKQ[i, D, :D]``. The rows ``WV[i, :D, :]`` and the
    column ``WKQ[i, :, D]`` are the ``*`` blocks: they never reach ``yhat``, so their
    gradients are exactly zero. App. D.1: with the vector blocks at zero and a symmetric
    task prior the population gradients of ``v_i``, ``u_i`` vanish (eqs. 40-41).
    """

    def __init__(self, D: int, H: int, N: int, *, rho: float | None = None, softmax: bool = False,
                 dtype=DTYPE, device=None):
        super().__init__()
        self.D = validate.integer("D", D)
        self.H = validate.integer("H", H)
        self.N = validate.integer("N", N)
        if not isinstance(softmax, (bool, np.bool_)):
            raise ValueError(f"softmax: expected True or False, got {softmax!r}")  # noqa: TRY004
        self.softmax = bool(softmax)
        if rho is not None and self.softmax:
            raise ValueError("rho: the softmax layer has no normaliser (rho = 1)")
        self.rho = float(self.N) if rho is None else validate.positive("rho", rho)
        shape = (self.H, self.D + 1, self.D + 1)
        self.WV = nn.Parameter(torch.zeros(shape, dtype=dtype, device=device))
        self.WKQ = nn.Parameter(torch.zeros(shape, dtype=dtype, device=device))

    def extra_repr(self) -> str:
        kind = "softmax" if self.softmax else f"linear, rho={self.rho:g}"
        return f"D={self.D}, H={self.H}, N={self.N}, {kind}"

    # -- forward ------------------------------------------------------------------------
    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """``ATTN_M(X)`` for a batch of token matrices ``X`` of shape (B, D+1, N+1); the softmax layer:
        ``X + sum_i W^V_i X softmax(X^T W^KQ_i X)`` (softmax over the keys, every column a key)."""
        X = _as_tokens(X, self.D)
        if self.softmax:
            scores = torch.einsum("bcn,hcd,bdm->bhnm", X, self.WKQ, X)          # [key n, query m]
            return X + torch.einsum("hec,bcn,bhnm->bem", self.WV, X, torch.softmax(scores, dim=-2))
        return X + self._head_sum(X @ X.transpose(1, 2)) @ X / self.rho

    def _head_sum(self, XXt: torch.Tensor) -> torch.Tensor:
        """``S = sum_i W^V_i (X X^T) W^KQ_i`` per sequence, shape (B, D+1, D+1).

        Written as two flat matrix products over (head, index) pairs; uses the symmetry
        of ``X X^T``.
        """
        B, d, H = XXt.shape[0], self.D + 1, self.H
        # T[b, c, (h, a)] = sum_k XXt[b, c, k] WV[h, a, k] = (W^V_h X X^T)[a, c]
        T = XXt @ self.WV.permute(2, 0, 1).reshape(d, H * d)
        T = T.reshape(B, d, H, d).permute(0, 3, 2, 1).reshape(B * d, H * d)   # [(b, a), (h, c)]
        return (T @ self.WKQ.reshape(H * d, d)).reshape(B, d, d)

    def predict(self, X: torch.Tensor, gram: torch.Tensor | None = None) -> torch.Tensor:
        """``yhat = ATTN_M(X)[D, N]``, the bottom-right entry (eq. 3); shape (B,).

        Evaluates only that entry of :meth:`forward`'s expression,
        ``X[D, N] + (1/rho) sum_i W^V_i[D, :] X X^T W^KQ_i X[:, N]`` (same function, same
        gradients, less work); the checks compare it with ``forward(X)[:, D, N]``. The linear layer
        contracts it as ``(1/rho) sum_{cde} (X X^T)_{cd} T_{cde} x_{q,e}`` with the parameter tensor
        ``T`` of :meth:`value_query_tensor`: one Gram matrix per sequence and one matrix product per
        batch (a batched product of tiny matrices costs several times more on a CPU).

        ``gram``, optional: ``X @ X.transpose(1, 2)`` of these sequences (linear layer only), for
        sequences evaluated again and again (a fixed test set); the same numbers as without it.
        """
        X = _as_tokens(X, self.D)
        if gram is not None and (self.softmax or not isinstance(gram, torch.Tensor)
                                 or gram.shape != (X.shape[0], self.D + 1, self.D + 1)):
            raise ValueError(f"gram: expected X X^T of shape {(X.shape[0], self.D + 1, self.D + 1)} "
                             "for a linear layer")
        if self.softmax:
            kq = torch.einsum("hcd,bd->bhc", self.WKQ, X[:, :, -1])             # W^KQ_i x_q
            weights = torch.softmax(torch.einsum("bhc,bcn->bhn", kq, X), dim=-1)   # over the N + 1 keys
            vals = torch.einsum("hc,bcn->bhn", self.WV[:, self.D, :], X)         # row D of W^V_i X
            return X[:, self.D, -1] + (vals * weights).sum((1, 2))
        B, d = X.shape[0], self.D + 1
        T = self._vq_matrix()                                                 # (d*d, d)
        gram = (X @ X.transpose(1, 2) if gram is None else gram).reshape(B, d * d)   # X X^T
        return X[:, self.D, -1] + ((gram @ T) * X[:, :, -1]).sum(-1) / self.rho

    def _vq_matrix(self) -> torch.Tensor:
        """:meth:`value_query_tensor` as a ((D+1)^2, D+1) matrix, rows ``(c, d)``, by one matrix product."""
        d = self.D + 1
        return (self.WV[:, self.D, :].T @ self.WKQ.reshape(self.H, d * d)).reshape(d * d, d)

    @torch.no_grad()
    def mse_gradients(self, X: torch.Tensor, y_q: torch.Tensor):
        """The loss ``mean (y_q - yhat)^2`` of :meth:`predict` and its gradient, without autograd (the online-SGD
        loop's path, :func:`train_online_sgd`; the softmax layer: :meth:`_softmax_mse_gradients`).

        Linear layer: ``T = w^T K`` with ``w`` the rows ``W^V_i[D, :]`` (H, D+1) and ``K`` the flattened ``W^KQ_i``
        (H, (D+1)^2), so ``dL/dw = K G^T`` and ``dL/dK = w G`` with ``G = dL/dT`` from
        :func:`_mse_value_query_gradient`; every other entry of ``W^V_i`` has gradient 0. Autograd's backward of
        :meth:`predict` to float round-off (a test compares them). Returns ``(loss, views, grads)``:
        the updated tensors are the views ``W^V[:, D, :]`` and ``W^KQ``."""
        if self.softmax:
            return self._softmax_mse_gradients(X, y_q)
        return self._value_query_gradients(lambda T: _mse_value_query_gradient(X, y_q, T, self.D, self.rho))

    @torch.no_grad()
    def next_token_gradients(self, X: torch.Tensor):
        """The next-token loss (eq. 23) of :func:`next_token_predictions` on ``X`` (N+1 labelled tokens) and its
        gradient, without autograd (:func:`train_online_sgd` with ``next_token=True``); linear layer only.
        Returns ``(loss, views, grads)`` as :meth:`mse_gradients`."""
        if self.softmax:
            raise ValueError("softmax: the next-token loss is defined for the linear layer only")
        return self._value_query_gradients(lambda T: _next_token_value_query_gradient(X, T, self.D))

    def _value_query_gradients(self, loss_and_gradient):
        """``(loss, views, grads)`` from ``loss_and_gradient(T) = (L, dL/dT)``, ``T`` the layer's value-query
        matrix: ``dL/dw = K G^T`` and ``dL/dK = w G`` (``w`` the rows ``W^V_i[D, :]``, ``K`` the flattened
        ``W^KQ_i``, ``G = dL/dT``)."""
        d = self.D + 1
        w, K = self.WV[:, self.D, :], self.WKQ.reshape(self.H, d * d)
        loss, G = loss_and_gradient((w.T @ K).reshape(d * d, d))
        G = G.reshape(d, d * d)
        return loss, [w, self.WKQ], [(G @ K.T).T, (w @ G).reshape(self.H, d, d)]

    def _softmax_mse_gradients(self, X: torch.Tensor, y_q: torch.Tensor):
        """:meth:`mse_gradients` of the softmax layer: :meth:`predict`'s forward, then its backward by hand
        (softmax's own backward kernel for the softmax), with ``r = dL/dyhat``: ``dL/dscore = softmax'(r v)``,
        through ``score_n = x_n^T W^KQ_i x_q`` to ``W^KQ_i``. The value rows enter through the attended token
        ``a_i = sum_n p_n x_n`` of each head (one batched product): ``yhat = X[D, N] + sum_i W^V_i[D, :] a_i``
        and ``dL/d(value row) = sum_b r a_i``. Autograd's values to float round-off (it sums in another
        order)."""
        B, D, H = X.shape[0], self.D, self.H
        d = D + 1
        x_q = X[:, :, -1]
        w = self.WV[:, D, :]
        kq = (x_q @ self.WKQ.reshape(H * d, d).mT).reshape(B, H, d)          # W^KQ_i x_q
        p = torch.softmax(kq @ X, dim=-1)                                     # over the N + 1 keys
        attended = (p @ X.mT).reshape(B, H * d)                               # a_i = sum_n p_n x_n
        diff = y_q - (X[:, D, -1] + attended @ w.reshape(H * d))
        loss = torch.mean(diff.square())
        r = diff * (-2.0 / B)                                                 # dL/dyhat
        vals = torch.einsum("hc,bcn->bhn", w, X)                             # row D of W^V_i X
        d_scores = torch._softmax_backward_data(r[:, None, None] * vals, p, -1, p.dtype)   # (B, H, N+1)
        d_kq = d_scores @ X.mT                                                # (B, H, D+1)
        d_WKQ = (d_kq.reshape(B, H * d).T @ x_q).reshape(H, d, d)
        return loss, [w, self.WKQ], [(r @ attended).reshape(H, d), d_WKQ]

    def value_query_tensor(self) -> torch.Tensor:
        """``T_{cde} = sum_i W^V_i[D, c] W^KQ_i[d, e]``, shape (D+1, D+1, D+1): the linear layer's
        prediction is ``X[D, N] + (1/rho) sum_{cde} (X X^T)_{cd} T_{cde} x_{q,e}``
        (:func:`next_token_predictions`)."""
        if self.softmax:
            raise ValueError("softmax: the softmax layer has no value-query tensor (linear layers only)")
        d = self.D + 1
        return self._vq_matrix().reshape(d, d, d)

    # -- blocks -------------------------------------------------------------------------
    def value_scalars(self) -> torch.Tensor:
        """``v_i = W^V_i[D, D]``, shape (H,) (the MLP's second layer ``w2``)."""
        return self.WV[:, self.D, self.D]

    def kq_blocks(self) -> torch.Tensor:
        """``U_i = W^KQ_i[:D, :D]``, shape (H, D, D)."""
        return self.WKQ[:, :self.D, :self.D]

    def value_vectors(self) -> torch.Tensor:
        """The vector blocks ``v_i = W^V_i[D, :D]``, shape (H, D); zero in the theory."""
        return self.WV[:, self.D, :self.D]

    def kq_vectors(self) -> torch.Tensor:
        """The vector blocks ``u_i = W^KQ_i[D, :D]``, shape (H, D); zero in the theory."""
        return self.WKQ[:, self.D, :self.D]

    def zero_blocks(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The blocks the theory holds at zero: ``(v_i)`` and ``(u_i)``, each of shape (H, D)."""
        return self.value_vectors(), self.kq_vectors()

    def zero_block_norms(self) -> tuple[float, float]:
        """Frobenius norms over all heads of the vector blocks ``(v_i)`` and ``(u_i)``."""
        with torch.no_grad():
            return tuple(float(torch.linalg.vector_norm(b)) for b in self.zero_blocks())

    def effective_matrix(self) -> torch.Tensor:
        """``M = sum_i v_i U_i`` (D x D), so that ``yhat = beta^T M x_q`` when the vector
        blocks vanish (eq. M). Differentiable; ``.detach()`` for numbers."""
        return torch.einsum("h,hij->ij", self.value_scalars(), self.kq_blocks())

    # -- initialisation -----------------------------------------------------------------
    def init_(self, generator: torch.Generator, w_init: float,
              star_std: float | None = None) -> "MergedLinearAttention":
        """Eq.-34 initialisation, in place.

        ``v_i ~ N(0, w_init^2 / H)``, ``U_i`` entries ``~ N(0, w_init^2 / (H D^2))`` (so that
        ``E||w2||^2 = E||W1||_F^2 = w_init^2``, eq. 35), the vector blocks ``v_i, u_i``
        exactly 0 (App. D.1). The ``*`` blocks (which never reach ``yhat``) get i.i.d.
        ``N(0, star_std^2)`` entries, by default the same scale as the ``U_i`` entries,
        ``w_init / (sqrt(H) D)``; the paper does not say how it sets them.
        """
        generator = validate.generator(generator)
        w_init = validate.nonnegative("w_init", w_init)
        D, H = self.D, self.H
        std_u = w_init / (np.sqrt(H) * D)
        star_std = std_u if star_std is None else validate.nonnegative("star_std", star_std)
        opts = dict(generator=generator, device=generator.device, dtype=self.WV.dtype)
        with torch.no_grad():
            v = torch.randn(H, **opts) * (w_init / np.sqrt(H))
            U = torch.randn(H, D, D, **opts) * std_u
            star_v = torch.randn(H, D, D + 1, **opts) * star_std
            star_kq = torch.randn(H, D + 1, **opts) * star_std
            WV = torch.zeros_like(self.WV, device=generator.device)
            WKQ = torch.zeros_like(self.WKQ, device=generator.device)
            WV[:, :D, :] = star_v
            WV[:, D, D] = v
            WKQ[:, :, D] = star_kq
            WKQ[:, :D, :D] = U
            self.WV.copy_(WV)
            self.WKQ.copy_(WKQ)
        return self

    def load_(self, v, U) -> "MergedLinearAttention":
        """Set ``v_i`` and ``U_i`` from arrays, zero the vector blocks ``v_i, u_i``.

        The ``*`` blocks are left as they are (call :meth:`init_` first to randomise them).
        Used to start the torch run from the same eq.-34 draw as the exact flow.

        Parameters
        ----------
        v : array_like, shape (H,)
        U : array_like, shape (H, D, D)
        """
        v_t, U_t = _load_arrays(v, U, self.H, self.D, self.WV)
        with torch.no_grad():
            self.WV[:, self.D, :] = 0.0
            self.WV[:, self.D, self.D] = v_t
            self.WKQ[:, self.D, :self.D] = 0.0
            self.WKQ[:, :self.D, :self.D] = U_t
        return self

    def set_vector_blocks_(self, v_vec, u_vec) -> "MergedLinearAttention":
        """Set the vector blocks ``v_i`` (``W^V_i[D, :D]``) and ``u_i`` (``W^KQ_i[D, :D]``),
        each of shape (H, D); for testing the general D.1 expression."""
        a = _as_param_tensor("v_vec", v_vec, (self.H, self.D), self.WV)
        b = _as_param_tensor("u_vec", u_vec, (self.H, self.D), self.WV)
        with torch.no_grad():
            self.WV[:, self.D, :self.D] = a
            self.WKQ[:, self.D, :self.D] = b
        return self


def _mse_value_query_gradient(X: torch.Tensor, y_q: torch.Tensor, T: torch.Tensor, D: int, rho: float):
    """``(L, dL/dT)`` of ``L = mean (y_q - yhat)^2``, ``yhat = X[D, N] + (1/rho) sum_{cde} (X X^T)_{cd}
    T_{cde} x_{q,e}`` (``T`` as a ((D+1)^2, D+1) matrix): ``dL/dT = (X X^T)^T (r x_q) / rho`` with ``r =
    -(2 (y_q - yhat) / B)``; autograd's backward of that expression to round-off (``r / rho`` as one product
    by ``-2 / (B rho)``, where autograd takes four operations)."""
    B, d = X.shape[0], D + 1
    x_q = X[:, :, -1]
    gram = (X @ X.mT).reshape(B, d * d)
    diff = y_q - (x_q[:, D] + ((gram @ T) * x_q).sum(-1) / rho)
    loss = torch.mean(diff.square())
    return loss, gram.T @ ((diff * (-2.0 / (B * rho))).unsqueeze(-1) * x_q)


class CubicFeatureMLP(nn.Module):
    """The two-layer linear network on cubic features, ``yhat = w2^T W1 z`` (eqs. 6-7).

    Width ``H``, no biases, no nonlinearity. Loaded from attention blocks by
    ``w2 = (v_1..v_H)`` and ``W1`` rows ``vec(U_i)^T`` (column-major), it computes the same
    function of ``X`` as :class:`MergedLinearAttention` with zero vector blocks.

    Parameters
    ----------
    D, H : int
        Token dimension and width (number of heads).
    order : {"F", "C"}
        The vec convention of the features (``"C"`` only for negative controls).

    Attributes
    ----------
    W1 : Parameter, shape (H, D*D)
    w2 : Parameter, shape (H,)
    """

    def __init__(self, D: int, H: int, *, order: str = "F", dtype=DTYPE, device=None):
        super().__init__()
        self.D = validate.integer("D", D)
        self.H = validate.integer("H", H)
        if order not in ("F", "C"):
            raise ValueError(f"order: expected 'F' or 'C', got {order!r}")
        self.order = order
        self.W1 = nn.Parameter(torch.zeros(self.H, self.D * self.D, dtype=dtype, device=device))
        self.w2 = nn.Parameter(torch.zeros(self.H, dtype=dtype, device=device))

    def extra_repr(self) -> str:
        return f"D={self.D}, H={self.H}, order={self.order!r}"

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """``w2^T W1 z`` for features ``z`` of shape (B, D*D); returns shape (B,)."""
        if not isinstance(z, torch.Tensor) or z.ndim != 2 or z.shape[1] != self.D ** 2:
            got = tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
            raise ValueError(f"z: expected a tensor of shape (B, {self.D ** 2}), got {got}")
        return (z @ self.W1.T) @ self.w2

    def predict(self, X: torch.Tensor) -> torch.Tensor:
        """``yhat`` from token matrices: the network on ``z = vec(beta x_q^T)``."""
        return self.forward(cubic_features(_as_tokens(X, self.D), self.order))

    @torch.no_grad()
    def mse_gradients(self, X: torch.Tensor, y_q: torch.Tensor):
        """The loss ``mean (y_q - yhat)^2`` of :meth:`predict` and its gradient, without autograd (the online-SGD
        loop's path, :func:`train_online_sgd`): with ``h = W1 z`` and ``r = dL/dyhat``, ``dL/dw2 = h^T r`` and
        ``dL/dW1 = (r w2^T)^T z``, the same operations as autograd's backward. Returns ``(loss, params, grads)``."""
        z = cubic_features(_as_tokens(X, self.D), self.order)
        h = z @ self.W1.T
        diff = y_q - h @ self.w2
        loss = torch.mean(diff ** 2)
        r = -((torch.ones((), dtype=diff.dtype, device=diff.device) / X.shape[0]) * (2 * diff))
        return loss, [self.W1, self.w2], [torch.outer(r, self.w2).T @ z, h.T @ r]

    def effective_matrix(self) -> torch.Tensor:
        """``M = vec^{-1}(W1^T w2)`` (column-major), so that ``yhat = beta^T M x_q``."""
        m = self.w2 @ self.W1
        return m.reshape(self.D, self.D).T

    def load_(self, v, U) -> "CubicFeatureMLP":
        """``w2 = v`` and ``W1[i] = vec(U_i)`` (column-major), from arrays of shapes
        (H,) and (H, D, D)."""
        v_t, U_t = _load_arrays(v, U, self.H, self.D, self.W1)
        with torch.no_grad():
            self.w2.copy_(v_t)
            self.W1.copy_(U_t.transpose(1, 2).reshape(self.H, self.D * self.D))
        return self


def _as_param_tensor(name, value, shape, like: torch.Tensor) -> torch.Tensor:
    arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
    try:
        arr = np.asarray(arr, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected real numbers, got {value!r}") from None
    if arr.shape != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinity")
    return torch.as_tensor(arr, dtype=like.dtype, device=like.device)


def _load_arrays(v, U, H, D, like):
    return (_as_param_tensor("v", v, (H,), like), _as_param_tensor("U", U, (H, D, D), like))


# -- training -----------------------------------------------------------------------------
@dataclass
class TrainResult:
    """The record of an online SGD run.

    Attributes
    ----------
    step : ndarray of int
        Logged step numbers k (0 is the initialisation).
    t : ndarray
        ``t / tau = 2 eta k`` (eq. 5, whose loss ``L`` has no factor 1/2).
    loss : ndarray
        Population loss ``L(M_k)`` of the effective matrix (closed form
        ``linear_attention.merged.loss``), not the noisy batch loss.
    batch_loss : ndarray
        Mean squared error of the batch used at the logged step (NaN at step 0).
    zero_v, zero_u : ndarray or None
        Norms of the attention's vector blocks ``v_i``, ``u_i`` (None for the MLP).
    M : ndarray (D, D)
        The final effective matrix.
    M_log : ndarray (T, D, D)
        The effective matrix at every logged step.
    weights : dict or None
        ``{i: model.flow_weights()}`` at logged steps ``step[i]``, for a model that has it (the
        separate layer's ``(v, k, q)``: a state the exact flow can start from), at about
        :data:`WEIGHT_SNAPSHOTS` evenly spaced logged steps (every one for a short run); None
        otherwise.
    eta, batch : float, int
    seconds : float
        Wall time of the run.
    """

    step: np.ndarray
    t: np.ndarray
    loss: np.ndarray
    batch_loss: np.ndarray
    zero_v: np.ndarray | None
    zero_u: np.ndarray | None
    M: np.ndarray
    eta: float
    batch: int
    seconds: float
    M_log: np.ndarray = field(default=None, repr=False)
    weights: dict | None = field(default=None, repr=False)


#: About how many weight snapshots :func:`train_online_sgd` keeps (``TrainResult.weights``).
WEIGHT_SNAPSHOTS = 4000


def next_token_predictions(model, X: torch.Tensor) -> torch.Tensor:
    """The linear layer's predictions at every position of whole sequences (next-token loss, eq. 23).

    ``X`` (B, D+1, N+1) holds N+1 labelled tokens. Position ``p = 1..N`` is the layer applied to the
    first ``p + 1`` tokens with the last one's label slot zeroed (its query) and ``rho = p`` (the
    ``1/N`` of eqs. M and S is the current context length, App. A.1): ``yhat_p = (1/p) sum_{cde}
    G^(p)_{cd} T_{cde} q_{p,e}`` with ``G^(p) = sum_{j <= p} z_j z_j^T + q_p q_p^T`` (the layer's
    ``X X^T`` over that prefix, query included), ``q_p = (x_{p+1}, 0)`` and ``T`` the model's
    :meth:`value_query_tensor`. The same function as ``model.predict`` on each prefix (a test
    compares them); returns (B, N), the predictions of ``y_2 .. y_{N+1}``.
    """
    X = _as_tokens(X, model.D)
    d = model.D + 1
    G, q, p = _next_token_terms(X, model.D)
    return ((G @ model.value_query_tensor().reshape(d * d, d)) * q).sum(-1) / p


def _next_token_terms(X: torch.Tensor, D: int):
    """``(G, q, p)`` of :func:`next_token_predictions`: the prefix Gram matrices ``G^(p)`` flattened, shape
    (B, N, (D+1)^2), the queries ``q_p`` (B, N, D+1) and the context lengths ``p = 1..N``."""
    B, d, n1 = X.shape
    N = n1 - 1
    if N < 1:
        raise ValueError(f"X: expected at least 2 tokens per sequence, got {n1}")
    Z = X.transpose(1, 2)                                                   # (B, N+1, d)
    S = torch.cumsum(Z[:, :N, :, None] * Z[:, :N, None, :], dim=1)           # sum_{j<=p} z_j z_j^T
    q = torch.cat([Z[:, 1:, :D], torch.zeros_like(Z[:, 1:, D:])], dim=2)    # (B, N, d)
    G = S + q[:, :, :, None] * q[:, :, None, :]
    return G.reshape(B, N, d * d), q, torch.arange(1, N + 1, dtype=X.dtype, device=X.device)


def _next_token_value_query_gradient(X: torch.Tensor, T: torch.Tensor, D: int):
    """``(L, dL/dT)`` of the next-token loss ``L = mean_{b,p} (y_{p+1} - yhat_p)^2`` (eq. 23) of
    :func:`next_token_predictions` with the value-query tensor ``T`` (a ((D+1)^2, D+1) matrix): with
    ``r_p = dL/dyhat_p``, ``dL/dT = sum_{b,p} G^(p) (r_p / p) q_p^T``, one matrix product over every
    prediction of the batch. ``X`` holds N+1 labelled tokens."""
    B, d, n1 = X.shape
    N = n1 - 1
    G, q, p = _next_token_terms(X, D)
    G = G.reshape(B * N, d * d)
    diff = X[:, D, 1:] - ((G @ T).reshape(B, N, d) * q).sum(-1) / p
    loss = torch.mean(diff.square())
    rq = ((diff * (-2.0 / (B * N))) / p).unsqueeze(-1) * q                # (r_p / p) q_p
    return loss, G.T @ rq.reshape(B * N, d)


def next_token_population_loss(Lambda, N_max: int, M) -> np.ndarray:
    """Population next-token loss (eq. 23) of effective matrices ``M`` (..., D, D): the average over
    context lengths ``p = 1..N_max`` of the fixed-length loss ``linear_attention.merged.loss``."""
    import theory

    loss_cf = theory.get("linear_attention.merged.loss")
    N_max = validate.integer("N_max", N_max)
    return np.mean([np.asarray(loss_cf(Lambda=Lambda, N=p, M=M), dtype=np.float64)
                    for p in range(1, N_max + 1)], axis=0)


def train_online_sgd(model, Lambda, N: int, *, eta: float, steps: int, batch: int,
                     generator: torch.Generator, device=None, log_every: int = 1,
                     iterate: Callable[[Iterable, str], Iterable] | None = None,
                     threads: int | None = 1, next_token: bool = False, w_star=None, fixed=0.0,
                     callback: Callable[[int], None] | None = None):
    """Online SGD on freshly sampled batches; log the population loss of ``M``.

    Each step draws ``batch`` new sequences (:func:`sample_tokens`), takes the loss
    ``mean (y_q - yhat)^2`` (the paper's ``L`` without a factor 1/2) and makes one
    ``torch.optim.SGD(lr=eta)`` step (:func:`sgd_step`). A step is an Euler step of ``tau dW/dt = -1/2
    dL/dW`` of size ``dt / tau = 2 eta``, so step k is at ``t / tau = 2 eta k``. A model with
    ``mse_gradients(X, y_q)`` (the attention layers and the MLP) gives its gradient in closed form,
    autograd's backward of its ``predict`` without building the graph (to float round-off; tests compare
    them; a step of a small layer cost about half as much), and a linear layer with ``next_token_gradients(X)``
    that of the next-token loss; the others' gradients come from one :func:`torch.autograd.grad` call.

    Parameters
    ----------
    model : MergedLinearAttention, SeparateLinearAttention or CubicFeatureMLP, or a list of them
        Anything with ``predict(X)``, ``effective_matrix()`` and attribute ``D``; trained
        in place (moved to ``device``). A list or tuple: the models are trained side by side on
        the same batches (what one generator per model seeded alike would give, drawn once).
        The logged quantities are evaluated afterwards, batched over the saved parameters
        (:class:`_RunLog`), so ``effective_matrix()`` must be torch operations on the parameters.
    Lambda : array_like
        Token covariance (D x D SPD or eigenvalues).
    N : int
        Context length of the sampled sequences.
    eta : float
        Learning rate.
    steps : int
        Number of SGD steps.
    batch : int
        Sequences per step.
    generator : torch.Generator
        Source of all randomness (on ``device``).
    device : str or torch.device, optional
        Defaults to the generator's device.
    log_every : int
        Log the population loss every this many steps (and at 0 and ``steps``).
    iterate : callable, optional
        ``iterate(range, desc)`` wrapper for a progress bar.
    threads : int or None
        CPU threads during the run (see :func:`cpu_threads`); None leaves torch's setting.
    next_token : bool
        Train on the next-token loss (eq. 23, App. A.1) instead: sequences of ``N + 1`` labelled
        tokens, the loss averaged over the predictions at every position
        (:func:`next_token_predictions`, context lengths ``1..N``), and the logged population loss
        :func:`next_token_population_loss` (``N`` is then ``N_max``). Linear layers only.
    w_star, fixed
        App. G's task prior (Fig. 14): a portion ``fixed`` of every batch has the task vector
        ``w_star`` (:func:`sample_tokens`). The logged population loss stays that of ``w ~ N(0, I)``.
        Side by side, ``fixed`` may be one portion per model: the models then see the same inputs and
        task vectors but for the first ``round(fixed * batch)`` of each one's batch (what each model trained
        alone from a generator in the same state sees).
    callback : callable, optional
        ``callback(k)`` at every logged step ``k`` (0 before the first step, then after step ``k``'s
        update), e.g. to evaluate the model on test sets during one run instead of many short runs.

    Returns
    -------
    TrainResult, or a list of them (one per model) when ``model`` is a list or tuple
    """
    import theory

    N = validate.integer("N", N)
    eta = validate.positive("eta", eta)
    steps = validate.integer("steps", steps, low=0)
    batch = validate.integer("batch", batch)
    log_every = validate.integer("log_every", log_every)
    generator = validate.generator(generator)
    several = isinstance(model, (list, tuple))
    models = list(model) if several else [model]
    if not models:
        raise ValueError("model: expected at least one model")
    if isinstance(fixed, (list, tuple, np.ndarray)):
        if not several or len(fixed) != len(models):
            raise ValueError(f"fixed: one portion per model trained side by side ({len(models)}), got {fixed!r}")
        portions = tuple(validate.probability("fixed", f) for f in fixed)
    else:
        portions = (validate.probability("fixed", fixed),) * len(models)
    if max(portions) > 0 and w_star is None:
        raise ValueError("w_star: a positive fixed portion needs the fixed task vector w_star")
    lam = validate_covariance(Lambda)
    for m in models:
        if not (hasattr(m, "predict") and hasattr(m, "effective_matrix")):
            raise ValueError("model: expected a model with predict(X) and effective_matrix()")
        if lam.shape[0] != m.D:
            raise ValueError(f"Lambda: dimension {lam.shape[0]} does not match the model's "
                             f"D = {m.D}")
        if getattr(m, "N", N) != N:
            raise ValueError(f"N: the model was built for N = {m.N}, got {N}")
    device = torch.device(device) if device is not None else generator.device
    if device.type != generator.device.type:
        raise ValueError(f"generator: on {generator.device}, but device is {device}")
    for m in models:
        m.to(device)
    dtypes = {next(m.parameters()).dtype for m in models}
    if len(dtypes) > 1:
        raise ValueError(f"model: the models trained side by side must share a dtype, got {sorted(map(str, dtypes))}")
    dtype = dtypes.pop()
    chol = torch.as_tensor(np.linalg.cholesky(lam), dtype=dtype, device=device)
    w_fixed, _ = _fixed_tasks(w_star, max(portions), batch, chol)
    n_fixed = tuple(_fixed_tasks(w_star, p, batch, chol)[1] for p in portions)
    n_drawn = tuple(dict.fromkeys(n_fixed))                  # the distinct batches of a step
    loss_cf = theory.get("linear_attention.merged.loss")
    n_logs = steps // log_every + 2
    logs = [_RunLog(m, max(1, (steps // log_every) // WEIGHT_SNAPSHOTS), n_logs) for m in models]
    # the layers' and the MLP's gradients in closed form (their mse_gradients(): autograd's backward of
    # predict() without building its graph; next_token_gradients() for the linear layers' next-token loss),
    # other models' from autograd
    manual = [(hasattr(m, "next_token_gradients") and not getattr(m, "softmax", False) if next_token
               else hasattr(m, "mse_gradients")) and all(p.requires_grad for p in m.parameters()) for m in models]
    params = [p for m, man in zip(models, manual) if not man for p in m.parameters() if p.requires_grad]

    t0 = time.perf_counter()
    for lg in logs:
        lg.log(0, float("nan"))
    if callback is not None:
        callback(0)
    loop = range(1, steps + 1)
    if iterate is not None:
        loop = iterate(loop, "online SGD")
    # every gradient in closed form: a step needs no autograd at all, and inference mode skips its dispatch (the
    # same kernels, the same numbers); the batch losses it keeps for the log are inference tensors, read only by
    # torch.stack
    step_mode = torch.inference_mode if all(manual) else contextlib.nullcontext
    with cpu_threads(threads if device.type == "cpu" else None):
        for k in loop:
            with step_mode():
                losses = _online_sgd_step(models, manual, params, n_fixed, n_drawn, N, batch, generator, device,
                                          dtype, chol, w_fixed, eta, next_token)
            if k % log_every == 0 or k == steps:
                _RunLog.log_all(logs, k, losses)
                if callback is not None:
                    callback(k)
        for lg in logs:
            lg.reduce()
    seconds = time.perf_counter() - t0
    population = (lambda Lambda, N, M: next_token_population_loss(Lambda, N, M)) if next_token else loss_cf
    out = [lg.result(population, lam, N, eta, batch, seconds) for lg in logs]
    return out if several else out[0]


def _online_sgd_step(models, manual, params, n_fixed, n_drawn, N, batch, generator, device, dtype, chol, w_fixed,
                     eta, next_token) -> list:
    """One step of :func:`train_online_sgd` on validated arguments: draw the batches, take every model's loss and
    gradient, update; returns the batch losses (tensors)."""
    drawn = dict(zip(n_drawn, _draw_token_variants(N, batch, generator, device, dtype, chol, w_fixed,
                                                      n_drawn)))
    if next_token:                                  # every label, the query's included
        for X, y_q, _ in drawn.values():
            X[:, -1, -1] = y_q
    losses, auto, views, grads = [], [], [], []
    for m, man, n in zip(models, manual, n_fixed):
        X, y_q, _ = drawn[n]
        if man:
            loss, v, g = m.next_token_gradients(X) if next_token else m.mse_gradients(X, y_q)
            views += v
            grads += g
        else:
            loss = torch.mean(((X[:, -1, 1:] - next_token_predictions(m, X)) if next_token
                               else (y_q - m.predict(X))) ** 2)
            auto.append(loss)
        losses.append(loss)
    if auto:
        # the other models' gradients from one pass of the autograd engine (the models share no
        # parameter: each gradient is that model's alone, the same numbers as a backward() each)
        views += params
        grads += torch.autograd.grad(auto, params, allow_unused=True)
    _sgd_update(views, grads, eta)
    return losses


def sgd_step(params: list, eta: float) -> None:
    """``p <- p - eta * p.grad`` for every tensor of ``params`` that has a gradient: the update of
    ``torch.optim.SGD(lr=eta)`` (no momentum, no weight decay), the same values to the last bit,
    as one fused call without the optimizer's per-step bookkeeping (about 0.15 ms a step on a
    CPU, a tenth of a small layer's step)."""
    live = [p for p in params if p.grad is not None]
    if live:
        with torch.no_grad():
            torch._foreach_add_(live, [p.grad for p in live], alpha=-eta)


def _sgd_update(params: list, grads, eta: float) -> None:
    """``p <- p - eta * g`` for the parameters whose gradient ``g`` is not None: :func:`sgd_step` on
    gradients returned by :func:`torch.autograd.grad` (the same values to the last bit)."""
    live = [(p, g) for p, g in zip(params, grads) if g is not None]
    if live:
        with torch.no_grad():
            torch._foreach_add_([p for p, _ in live], [g for _, g in live], alpha=-eta)


#: Logged steps whose parameters :func:`train_online_sgd` holds before it reduces them to effective
#: matrices in one batched call.
LOG_CHUNK = 1024


class _Probe(nn.Module):
    """What :func:`train_online_sgd` records of a model, as a ``forward`` of saved parameters.

    Wrapping the model lets :func:`torch.func.functional_call` evaluate its ``effective_matrix()``
    (and ``zero_blocks()``, ``flow_tensors()`` where it has them) at parameters other than its own,
    and :func:`torch.func.vmap` do so for a whole stack of logged steps at once."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self) -> dict:
        m = self.model
        out = {"M": m.effective_matrix()}
        if hasattr(m, "zero_blocks"):
            out["zero"] = torch.stack([torch.linalg.vector_norm(b) for b in m.zero_blocks()])
        if hasattr(m, "flow_tensors"):
            out["flow"] = tuple(m.flow_tensors())
        return out


class _RunLog:
    """What :func:`train_online_sgd` records of one model.

    A logged step copies the model's parameters into a buffer and keeps the batch loss as a tensor
    (a few tensor copies, no conversion to numpy, no wait for a GPU); every :data:`LOG_CHUNK` logged
    steps, and at the end, the buffer is reduced in one batched call (:class:`_Probe` under
    :func:`torch.func.vmap`) to the effective matrices, the zero-block norms and the kept flow
    weights. The model's ``effective_matrix()`` (``zero_blocks()``, ``flow_tensors()``) must therefore
    be torch operations on its parameters. Per step the same quantities as evaluating them on the
    model itself, up to the summation order of the batched products (float round-off).
    """

    def __init__(self, model, keep_every: int, n_logs: int):
        self.model, self.keep_every = model, keep_every
        named = list(model.named_parameters())
        self.names = ["model." + n for n, _ in named]
        self.params = [p for _, p in named]
        rows = max(1, min(LOG_CHUNK, n_logs))
        self.buffers = [torch.empty((rows, *p.shape), dtype=p.dtype, device=p.device) for p in self.params]
        self.rows, self.logged = 0, 0
        self.probe = _Probe(model)
        self.step, self.batch_loss, self.pending, self.v, self.u, self.M = [], [], [], [], [], []
        self.weights = {} if hasattr(model, "flow_tensors") else None
        self.has_blocks = hasattr(model, "zero_blocks")

    @torch.no_grad()
    def log(self, k: int, batch_loss) -> None:
        """Record step ``k``: the model's parameters now and ``batch_loss`` (a float or a 0-d tensor)."""
        _RunLog.log_all([self], k, [batch_loss])

    @staticmethod
    @torch.no_grad()
    def log_all(logs: list, k: int, losses: list) -> None:
        """:meth:`log` of every model trained side by side at step ``k`` (``losses``: their batch losses as
        tensors, or floats), the parameters of all copied by one fused call."""
        for lg in logs:
            if lg.buffers and lg.rows == lg.buffers[0].shape[0]:
                lg.reduce()
        dst = [b[lg.rows] for lg in logs for b in lg.buffers]
        if dst:
            torch._foreach_copy_(dst, [p for lg in logs for p in lg.params])
        for lg, loss in zip(logs, losses):
            lg.rows += 1
            lg.step.append(k)
            lg.pending.append(loss.detach() if getattr(loss, "requires_grad", False) else loss)

    @torch.no_grad()
    def reduce(self) -> None:
        """The buffered steps to numpy: effective matrices, zero-block norms, kept flow weights, batch losses."""
        n, first = self.rows, self.logged
        if n == 0:
            return
        state = {name: b[:n] for name, b in zip(self.names, self.buffers)}
        out = torch.func.vmap(lambda st: torch.func.functional_call(self.probe, st, ()))(state)
        self.M.append(out["M"].to(torch.float64).cpu().numpy())
        if self.has_blocks:
            norms = out["zero"].to(torch.float64).cpu().numpy()
            self.v.append(norms[:, 0])
            self.u.append(norms[:, 1])
        if self.weights is not None:
            keep = [i for i in range(first, first + n) if i % self.keep_every == 0]
            if keep:
                idx = torch.as_tensor([i - first for i in keep], device=out["M"].device)
                arrays = [t[idx].to(torch.float64).cpu().numpy() for t in out["flow"]]
                for j, i in enumerate(keep):
                    self.weights[i] = tuple(a[j].copy() for a in arrays)
        tensors = [x for x in self.pending if isinstance(x, torch.Tensor)]
        values = iter(torch.stack(tensors).to(torch.float64).cpu().tolist() if tensors else ())
        self.batch_loss.extend(next(values) if isinstance(x, torch.Tensor) else float(x) for x in self.pending)
        self.pending = []
        self.rows, self.logged = 0, first + n

    def result(self, loss_cf, lam, N: int, eta: float, batch: int, seconds: float) -> TrainResult:
        Ms = np.concatenate(self.M)
        population = loss_cf(Lambda=lam, N=N, M=Ms)  # one call on the stack of logged matrices
        step = np.asarray(self.step, dtype=np.int64)
        return TrainResult(
            step=step, t=2.0 * eta * step, loss=population, batch_loss=np.asarray(self.batch_loss),
            zero_v=np.concatenate(self.v) if self.has_blocks else None,
            zero_u=np.concatenate(self.u) if self.has_blocks else None,
            M=Ms[-1], eta=eta, batch=batch, seconds=seconds, M_log=Ms, weights=self.weights)


def benchmark_steps(D: int, N: int, H: int, batch: int, steps: int, device="cpu",
                    threads: int | None = 1) -> float:
    """SGD steps per second of :class:`MergedLinearAttention` (sampling, forward, backward,
    update) on white tokens, after one warm-up step; float64, ``threads`` CPU threads."""
    D, N, H = validate.integer("D", D), validate.integer("N", N), validate.integer("H", H)
    batch, steps = validate.integer("batch", batch), validate.integer("steps", steps)
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    model = MergedLinearAttention(D, H, N, device=device).init_(gen, 0.1)
    chol = torch.eye(D, dtype=DTYPE, device=device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        X, y_q, _ = sample_tokens(None, N, batch, generator=gen, device=device, chol=chol)
        opt.zero_grad(set_to_none=True)
        torch.mean((y_q - model.predict(X)) ** 2).backward()
        opt.step()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    with cpu_threads(threads if device.type == "cpu" else None):
        step()
        sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        return steps / (time.perf_counter() - t0)
