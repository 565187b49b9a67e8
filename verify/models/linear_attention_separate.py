"""Torch model of multi-head attention with separate key and query matrices (``ATTN_S``).

Zhang, Singh, Latham, Saxe 2025 (ICML), *Training Dynamics of In-Context Learning in
Linear Attention*, §2.2, §2.4, §4-5 and App. C.2, F.1.

On the token matrix ``X`` of eq. 1 (shape (D+1, N+1), the query's label slot 0) the linear
layer with ``H`` heads of rank ``R`` is (§2.4)

    ATTN_S(X) = X + sum_i (1/N) W^V_i X X^T W^K_i^T W^Q_i X,

with ``W^V_i`` of shape (D+1, D+1) and ``W^K_i, W^Q_i`` of shape (R, D+1); the prediction is
the bottom-right entry ``yhat = ATTN_S(X)[D, N]`` (eq. 3, 0-based). With the blocks::

    W^V_i = [[*,     *  ],     W^K_i = [k_ir^T, k_ir]_{r=1..R},   W^Q_i = [q_ir^T, *]_{r=1..R}
             [v_i^T, v_i]],

and the vector ``v_i`` and scalars ``k_ir`` at zero, ``yhat = beta^T M x_q`` with the
effective matrix ``M = sum_{i,r} v_i k_ir q_ir^T`` (eq. S, eq. 12). The softmax variant
(§2.2) replaces the map ``(1/N) X^T W^K^T W^Q X`` by a softmax over the keys (all N+1
tokens, query included) of the unscaled scores ``X^T W^K^T W^Q X`` (``rho = 1``: the paper
does not state ``rho``; the authors' public code uses none); it is used for Fig. 5b.

Sampling and online SGD are shared with the merged model:
:func:`verify.models.linear_attention.sample_tokens` and
:func:`verify.models.linear_attention.train_online_sgd` (which logs the population loss of
:meth:`SeparateLinearAttention.effective_matrix`, meaningful for the linear layer only).

Everything is float64 by default. Randomness comes only from an explicit
``torch.Generator``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .. import validate
from .linear_attention import (DTYPE, _as_param_tensor, _as_tokens, _mse_value_query_gradient,
                               _next_token_value_query_gradient)

__all__ = ["SeparateLinearAttention"]


class SeparateLinearAttention(nn.Module):
    """Multi-head attention with separate rank-``R`` keys and queries on full token matrices.

    Parameters
    ----------
    D : int
        Token dimension (the label adds one row).
    H : int
        Number of heads.
    R : int
        Rank of each head's key and query (rows of ``W^K_i``, ``W^Q_i``).
    N : int
        Context length the layer is built for; the linear layer divides by ``rho = N``.
    softmax : bool
        Softmax attention over the keys of ``X^T W^K^T W^Q X`` (no ``1/rho``) instead of the
        linear map; the effective matrix then does not describe the function.
    rho : float, optional
        The linear layer's normaliser; only for negative controls (e.g. ``N + 1``).
    dtype, device
        Parameter precision (float64) and device.

    Attributes
    ----------
    WV : Parameter, shape (H, D+1, D+1)
    WK, WQ : Parameter, shape (H, R, D+1)
        All entries trainable; zero until :meth:`init_` or :meth:`load_`.

    Notes
    -----
    Blocks (0-based): ``v_i = WV[i, D, D]``, vector ``v_i = WV[i, D, :D]``, ``k_ir =
    WK[i, r, :D]``, scalar ``k_ir = WK[i, r, D]``, ``q_ir = WQ[i, r, :D]``. The rows
    ``WV[i, :D, :]`` and the column ``WQ[i, :, D]`` are the ``*`` blocks: the query's label
    slot is 0, so ``WQ[i, :, D]`` never reaches ``yhat``, and only row ``D`` of ``W^V_i``
    does. With the vector blocks at zero the population gradients of ``v_i`` (vector) and
    ``k_ir`` (scalar) vanish (App. F.1).
    """

    def __init__(self, D: int, H: int, R: int, N: int, softmax: bool = False, *,
                 rho: float | None = None, dtype=DTYPE, device=None):
        super().__init__()
        self.D = validate.integer("D", D)
        self.H = validate.integer("H", H)
        self.R = validate.integer("R", R)
        self.N = validate.integer("N", N)
        if not isinstance(softmax, (bool, np.bool_)):
            raise ValueError(f"softmax: expected True or False, got {softmax!r}")  # noqa: TRY004
        self.softmax = bool(softmax)
        if rho is not None and self.softmax:
            raise ValueError("rho: the softmax layer has no normaliser (rho = 1)")
        self.rho = float(self.N) if rho is None else validate.positive("rho", rho)
        d = self.D + 1
        self.WV = nn.Parameter(torch.zeros(self.H, d, d, dtype=dtype, device=device))
        self.WK = nn.Parameter(torch.zeros(self.H, self.R, d, dtype=dtype, device=device))
        self.WQ = nn.Parameter(torch.zeros(self.H, self.R, d, dtype=dtype, device=device))

    def extra_repr(self) -> str:
        kind = "softmax" if self.softmax else f"linear, rho={self.rho:g}"
        return f"D={self.D}, H={self.H}, R={self.R}, N={self.N}, {kind}"

    # -- forward ------------------------------------------------------------------------
    def _weights(self, scores: torch.Tensor) -> torch.Tensor:
        """Attention map from scores indexed [..., key, query]."""
        if self.softmax:
            return torch.softmax(scores, dim=-2)
        return scores / self.rho

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """``ATTN_S(X)`` for a batch of token matrices ``X`` of shape (B, D+1, N+1)."""
        X = _as_tokens(X, self.D)
        keys = torch.einsum("hrc,bcn->bhrn", self.WK, X)           # W^K_i X
        queries = torch.einsum("hrc,bcn->bhrn", self.WQ, X)        # W^Q_i X
        scores = torch.einsum("bhra,bhrn->bhan", keys, queries)    # X^T W^K^T W^Q X
        values = torch.einsum("hec,bca->bhea", self.WV, X)         # W^V_i X
        out = torch.einsum("bhea,bhan->ben", values, self._weights(scores))
        return X + out

    def predict(self, X: torch.Tensor) -> torch.Tensor:
        """``yhat = ATTN_S(X)[D, N]``, the bottom-right entry (eq. 3); shape (B,).

        Evaluates only the query column of :meth:`forward`'s expression (same function,
        same gradients, less work). The linear layer contracts
        ``(1/rho) sum_i w_i^T (X X^T) W^K_i^T W^Q_i x_q`` (``w_i = W^V_i[D, :]``) as
        ``(1/rho) sum_{c,d,e} (X X^T)_{cd} T_{cde} x_{q,e}`` with the parameter tensor
        ``T_{cde} = sum_{i,r} w_{i,c} (k_ir)_d (q_ir)_e`` (all D+1 entries of every
        row): one Gram matrix per sequence and one matrix product per batch, whatever
        ``N``, ``H`` and ``R``. The softmax layer needs every score
        ``x_n^T W^K_i^T W^Q_i x_q = sum_r (k_ir . x_n) (q_ir . x_q)`` (``k_ir``, ``q_ir`` the full
        rows of ``W^K_i``, ``W^Q_i``): the key projections ``W^K_i x_n`` and the value rows
        ``W^V_i[D, :] x_n`` of all tokens come from one matrix product over the whole batch (a
        batched product of tiny per-sequence matrices costs several times more on a CPU).
        """
        X = _as_tokens(X, self.D)
        x_q = X[:, :, -1]
        w = self.WV[:, self.D, :]                                     # row D of each W^V_i
        B, d, n1 = X.shape
        if not self.softmax:
            T = self._vq_matrix()                                      # T_{(c,d),e}
            gram = (X @ X.transpose(1, 2)).reshape(B, d * d)           # X X^T, (B, (D+1)^2)
            return X[:, self.D, -1] + ((gram @ T) * x_q).sum(-1) / self.rho
        HR = self.H * self.R
        tokens = X.transpose(0, 1).reshape(d, B * n1)                  # every token of the batch, (D+1, B (N+1))
        proj = (torch.cat([self.WK.reshape(HR, d), w]) @ tokens).reshape(HR + self.H, B, n1)
        scores = proj[:HR] * (self.WQ.reshape(HR, d) @ x_q.T).unsqueeze(-1)      # (k_ir . x_n)(q_ir . x_q)
        if self.R > 1:
            scores = scores.reshape(self.H, self.R, B, n1).sum(1)
        # over the N + 1 keys, along the last axis (a softmax over a strided axis ran 5x slower on a CPU)
        return X[:, self.D, -1] + (proj[HR:] * torch.softmax(scores, dim=-1)).sum((0, 2))

    def value_query_tensor(self) -> torch.Tensor:
        """``T_{cde} = sum_{i,r} W^V_i[D, c] W^K_i[r, d] W^Q_i[r, e]``, shape (D+1, D+1, D+1): the
        linear layer's prediction is ``X[D, N] + (1/rho) sum_{cde} (X X^T)_{cd} T_{cde} x_{q,e}``
        (:func:`verify.models.linear_attention.next_token_predictions`)."""
        if self.softmax:
            raise ValueError("softmax: the softmax layer has no value-query tensor (linear layers only)")
        d = self.D + 1
        return self._vq_matrix().reshape(d, d, d)

    def _vq_matrix(self) -> torch.Tensor:
        """:meth:`value_query_tensor` as a ((D+1)^2, D+1) matrix, rows ``(c, d)``: ``sum_r k_ir q_ir^T``
        per head by one batched product, then the heads weighted by ``W^V_i[D, :]`` by one matrix product."""
        d = self.D + 1
        kq = (self.WK.mT @ self.WQ).reshape(self.H, d * d)            # sum_r (k_ir)_d (q_ir)_e per head
        return (self.WV[:, self.D, :].T @ kq).reshape(d * d, d)

    @torch.no_grad()
    def mse_gradients(self, X: torch.Tensor, y_q: torch.Tensor):
        """The loss ``mean (y_q - yhat)^2`` of :meth:`predict` and its gradient, without autograd (the online-SGD
        loop's path, :func:`verify.models.linear_attention.train_online_sgd`; the softmax layer:
        :meth:`_softmax_mse_gradients`).

        Linear layer: ``T = w^T K`` with ``w`` the rows ``W^V_i[D, :]`` and ``K_i = W^K_i^T W^Q_i`` flattened, so with
        ``G = dL/dT``: ``dL/dw = K G^T``, ``dL/dK = w G``, ``dL/dW^K_i = W^Q_i (dL/dK_i)^T``, ``dL/dW^Q_i
        = W^K_i dL/dK_i``; every other entry of ``W^V_i`` has gradient 0. Autograd's backward of :meth:`predict`
        to float round-off (a test compares them). Returns ``(loss, views, grads)``: the updated
        tensors are the views ``W^V[:, D, :]``, ``W^K`` and ``W^Q``."""
        if self.softmax:
            return self._softmax_mse_gradients(X, y_q)
        return self._value_query_gradients(lambda T: _mse_value_query_gradient(X, y_q, T, self.D, self.rho))

    @torch.no_grad()
    def next_token_gradients(self, X: torch.Tensor):
        """The next-token loss (eq. 23) of :func:`verify.models.linear_attention.next_token_predictions` on ``X``
        (N+1 labelled tokens) and its gradient, without autograd (``train_online_sgd(..., next_token=True)``);
        linear layer only. Returns ``(loss, views, grads)`` as :meth:`mse_gradients`."""
        if self.softmax:
            raise ValueError("softmax: the next-token loss is defined for the linear layer only")
        return self._value_query_gradients(lambda T: _next_token_value_query_gradient(X, T, self.D))

    def _value_query_gradients(self, loss_and_gradient):
        """``(loss, views, grads)`` from ``loss_and_gradient(T) = (L, dL/dT)``, ``T`` the layer's value-query
        matrix (:meth:`mse_gradients`' chain rule)."""
        d = self.D + 1
        w, K = self.WV[:, self.D, :], (self.WK.mT @ self.WQ).reshape(self.H, d * d)
        loss, G = loss_and_gradient((w.T @ K).reshape(d * d, d))
        G = G.reshape(d, d * d)
        gK = (w @ G).reshape(self.H, d, d)
        return loss, [w, self.WK, self.WQ], [(G @ K.T).T, (gK @ self.WQ.mT).mT, self.WK @ gK]

    def _softmax_mse_gradients(self, X: torch.Tensor, y_q: torch.Tensor):
        """:meth:`mse_gradients` of the softmax layer: :meth:`predict`'s forward, then its backward by hand
        (softmax's own backward kernel for the softmax), with ``r = dL/dyhat``: ``dL/d(value row) = r p``,
        ``dL/dscore = softmax'(r v)``, through ``score = (k . x_n)(q . x_q)`` to the key and query rows (both
        written into one buffer for one product with the tokens). Autograd's values to float round-off."""
        B, d, n1 = X.shape
        H, R, D = self.H, self.R, self.D
        HR = H * R
        x_q = X[:, :, -1]
        w = self.WV[:, D, :]
        tokens = X.transpose(0, 1).reshape(d, B * n1)
        proj = (torch.cat([self.WK.reshape(HR, d), w]) @ tokens).reshape(HR + H, B, n1)
        keys, vals = proj[:HR], proj[HR:]
        qp = (self.WQ.reshape(HR, d) @ x_q.T).unsqueeze(-1)                     # (q_ir . x_q), (HR, B, 1)
        scores = keys * qp
        if R > 1:
            scores = scores.reshape(H, R, B, n1).sum(1)
        p = torch.softmax(scores, dim=-1)
        diff = y_q - (X[:, D, -1] + (vals * p).sum((0, 2)))
        loss = torch.mean(diff.square())
        r = (diff * (-2.0 / B)).unsqueeze(-1)                                       # dL/dyhat, (B, 1)
        d_scores = torch._softmax_backward_data(r * vals, p, -1, p.dtype)
        if R > 1:
            d_scores = d_scores.unsqueeze(1).expand(H, R, B, n1).reshape(HR, B, n1)
        d_qp = (d_scores * keys).sum(-1)                                            # (HR, B)
        d_proj = torch.empty((HR + H, B, n1), dtype=p.dtype, device=p.device)     # written in place, no cat
        torch.mul(d_scores, qp, out=d_proj[:HR])
        torch.mul(r, p, out=d_proj[HR:])                                            # dL/d(value row)
        d_W = d_proj.reshape(HR + H, B * n1) @ tokens.T
        return loss, [self.WK, w, self.WQ], [d_W[:HR].reshape(H, R, d), d_W[HR:], (d_qp @ x_q).reshape(H, R, d)]

    # -- blocks -------------------------------------------------------------------------
    def value_scalars(self) -> torch.Tensor:
        """``v_i = W^V_i[D, D]``, shape (H,)."""
        return self.WV[:, self.D, self.D]

    def keys(self) -> torch.Tensor:
        """``k_ir = W^K_i[r, :D]``, shape (H, R, D)."""
        return self.WK[:, :, :self.D]

    def queries(self) -> torch.Tensor:
        """``q_ir = W^Q_i[r, :D]``, shape (H, R, D)."""
        return self.WQ[:, :, :self.D]

    def value_vectors(self) -> torch.Tensor:
        """The vector blocks ``v_i = W^V_i[D, :D]``, shape (H, D); zero in the theory."""
        return self.WV[:, self.D, :self.D]

    def key_scalars(self) -> torch.Tensor:
        """The scalar blocks ``k_ir = W^K_i[r, D]``, shape (H, R); zero in the theory."""
        return self.WK[:, :, self.D]

    def flow_tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(v, k, q)``: :meth:`value_scalars`, :meth:`keys`, :meth:`queries` (the tensors behind
        :meth:`flow_weights`)."""
        return self.value_scalars(), self.keys(), self.queries()

    def flow_weights(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(v, k, q)`` as float64 arrays: the reduced weights the exact flow integrates
        (:func:`verify.flows.separate.integrate`), so that it can start from a trained state."""
        with torch.no_grad():
            return tuple(t.detach().cpu().numpy().astype(np.float64) for t in self.flow_tensors())

    def zero_blocks(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The blocks the theory holds at zero: the vectors ``(v_i)`` (H, D) and the scalars ``(k_ir)`` (H, R)."""
        return self.value_vectors(), self.key_scalars()

    def zero_block_norms(self) -> tuple[float, float]:
        """Frobenius norms over all heads of the vector blocks ``(v_i)`` and the scalars ``(k_ir)``."""
        with torch.no_grad():
            return tuple(float(torch.linalg.vector_norm(b)) for b in self.zero_blocks())

    def effective_matrix(self) -> torch.Tensor:
        """``M = sum_{i,r} v_i k_ir q_ir^T`` (D x D), so that ``yhat = beta^T M x_q`` for the
        linear layer with zero ``v_i`` (vector) and ``k_ir`` (scalar) blocks (eq. S).
        Differentiable; ``.detach()`` for numbers."""
        return torch.einsum("h,hrd,hre->de", self.value_scalars(), self.keys(), self.queries())

    # -- initialisation -----------------------------------------------------------------
    def init_(self, generator: torch.Generator, w_init: float,
              star_std: float | None = None) -> SeparateLinearAttention:
        """Eq.-36 initialisation (App. C.2), in place.

        ``v_i ~ N(0, w_init^2 / H)``, ``k_ir, q_ir`` entries ``~ N(0, w_init^2 / (H R D))``
        (eq. 37: each group has squared norm ``w_init^2`` in expectation), the vector
        ``v_i`` and the scalars ``k_ir`` exactly 0 (App. F.1). The ``*`` blocks
        (``W^V_i[:D, :]``, ``W^Q_i[:, D]``) get i.i.d. ``N(0, star_std^2)`` entries, by
        default the key/query scale ``w_init / sqrt(H R D)``; the paper does not say how it
        sets them.
        """
        generator = validate.generator(generator)
        w_init = validate.nonnegative("w_init", w_init)
        D, H, R = self.D, self.H, self.R
        std_kq = w_init / np.sqrt(H * R * D)
        star_std = std_kq if star_std is None else validate.nonnegative("star_std", star_std)
        opts = {"generator": generator, "device": generator.device, "dtype": self.WV.dtype}
        with torch.no_grad():
            v = torch.randn(H, **opts) * (w_init / np.sqrt(H))
            k = torch.randn(H, R, D, **opts) * std_kq
            q = torch.randn(H, R, D, **opts) * std_kq
            star_v = torch.randn(H, D, D + 1, **opts) * star_std
            star_q = torch.randn(H, R, **opts) * star_std
            WV = torch.zeros(self.WV.shape, dtype=self.WV.dtype, device=generator.device)
            WK = torch.zeros(self.WK.shape, dtype=self.WK.dtype, device=generator.device)
            WQ = torch.zeros(self.WQ.shape, dtype=self.WQ.dtype, device=generator.device)
            WV[:, :D, :] = star_v
            WV[:, D, D] = v
            WK[:, :, :D] = k
            WQ[:, :, :D] = q
            WQ[:, :, D] = star_q
            self.WV.copy_(WV)
            self.WK.copy_(WK)
            self.WQ.copy_(WQ)
        return self

    def load_(self, v, k, q) -> SeparateLinearAttention:
        """Set ``v_i``, ``k_ir``, ``q_ir`` from arrays; zero the vector ``v_i`` and scalars ``k_ir``.

        The ``*`` blocks are left as they are (call :meth:`init_` first to randomise them).
        Used to start the torch run from the eq.-36 draw of
        :func:`verify.flows.separate.init_separate`, the exact flow's start.

        Parameters
        ----------
        v : array_like, shape (H,)
        k, q : array_like, shape (H, R, D)
        """
        H, R, D = self.H, self.R, self.D
        v_t = _as_param_tensor("v", v, (H,), self.WV)
        k_t = _as_param_tensor("k", k, (H, R, D), self.WK)
        q_t = _as_param_tensor("q", q, (H, R, D), self.WQ)
        with torch.no_grad():
            self.WV[:, D, :] = 0.0
            self.WV[:, D, D] = v_t
            self.WK[:, :, :D] = k_t
            self.WK[:, :, D] = 0.0
            self.WQ[:, :, :D] = q_t
        return self

    def set_zero_blocks_(self, v_vec, k_scalar) -> SeparateLinearAttention:
        """Set the vector blocks ``v_i`` (``W^V_i[D, :D]``, shape (H, D)) and the scalars
        ``k_ir`` (``W^K_i[:, D]``, shape (H, R)); for testing the general forward."""
        a = _as_param_tensor("v_vec", v_vec, (self.H, self.D), self.WV)
        b = _as_param_tensor("k_scalar", k_scalar, (self.H, self.R), self.WK)
        with torch.no_grad():
            self.WV[:, self.D, :self.D] = a
            self.WK[:, :, self.D] = b
        return self
