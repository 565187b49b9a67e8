"""The L-layer linear transformer of Ahn, Cheng, Daneshmand, Sra 2023 (numpy and torch).

K. Ahn, X. Cheng, H. Daneshmand, S. Sra, *Transformers learn to implement preconditioned
gradient descent for in-context learning*, NeurIPS 2023, §2-5.

Tokens are **columns** (eq. 1)::

    Z_0 = [[x^(1) ... x^(n)  x^(n+1)],
           [y^(1) ... y^(n)  0      ]]      shape (d + 1, n + 1)

One layer (eqs. 2-4) is ``Z_{l+1} = Z_l + (1/n) P_l Z_l M (Z_l^T Q_l Z_l)`` with the mask
``M = diag(1, ..., 1, 0)`` (the query is not a key or value), and the prediction is
``TF_L = -[Z_L]_{d+1, n+1}``; the loss is ``E (TF_L - y_q)^2`` (eq. 5 with its sign typo
corrected, App. A.1 eq. 58). Since ``Z M Z^T = Z_c Z_c^T`` (``Z_c``: the ``n`` context
columns), a linear layer is ``Z + (1/n) P (Z_c Z_c^T) Q Z``, which costs ``O(n d^2)`` per
prompt instead of the ``O(n^2 d)`` of the attention matrix (the recursions of eq. 57 are
its block form). The ReLU layer of §6 applies ``max(0, .)`` entrywise to ``Z^T Q Z`` and
needs the attention matrix.

Parametrisations: sparse (eq. 8) ``P = E_{d+1,d+1}``, ``Q = -[[A, 0], [0, 0]]`` (a
**minus** sign), general (eq. 11) ``P = [[B, 0], [0, 1]]``, ``Q = [[A, 0], [0, 0]]`` (no
minus sign). Lemma 1: under eq. 8 the forward pass is preconditioned gradient descent on
``R(w) = (1/2n) sum_i (w^T x_i - y_i)^2`` from ``w_0 = 0`` with preconditioner ``A_l^T``
(the paper prints ``A_l``; equal for symmetric ``A_l``).

Contents
--------
forward              numpy forward pass ``Z_L`` (linear or ReLU attention)
predict              ``TF_L = -[Z_L]_{d+1,n+1}``
sparse_layers        ``(P, Q)`` of eq. 8 from ``A_0..A_{L-1}``
general_layers       ``(P, Q)`` of eq. 11 from ``A_l, B_l``
preconditioned_gd    ``w_{l+1} = w_l - A_l grad R(w_l)``, ``grad R = S w - h``
dist_to_identity     the paper's ``Dist(M, I) = ||M - (tr M / d) I||_F / ||M||_F`` (§4.3)
LinearTransformer    torch module, parametrisations "full", "sparse", "gdpp"
train_adam           Adam/AdamW on fresh prompts, lr halving, per-matrix gradient clipping
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple

import numpy as np

from .. import validate

try:  # torch is needed only for the trainable model
    import torch
    from torch import nn
except ImportError:  # pragma: no cover
    torch = nn = None

__all__ = ["ACTIVATIONS", "PARAMETRISATIONS", "GDResult", "LinearTransformer", "TrainResult",
           "dist_to_identity", "forward", "general_layers", "predict", "preconditioned_gd",
           "sample_tokens_torch", "sparse_layers", "train_adam"]

ACTIVATIONS = (None, "relu")
PARAMETRISATIONS = ("full", "sparse", "gdpp")


# =====================================================================================
# Validation
# =====================================================================================


def _tokens(Z0) -> np.ndarray:
    Z = validate.real_array("Z0", Z0, (2, 3))
    if Z.ndim == 2:
        Z = Z[None]
    if Z.shape[1] < 2 or Z.shape[2] < 2:
        raise ValueError(f"Z0: expected shape (B, d + 1, n + 1) with d, n >= 1, got {Z.shape}")
    return Z


def _layer_stack(name: str, mats, size: int | None) -> np.ndarray:
    """A list of L square matrices (or an (L, k, k) array) as an (L, k, k) array."""
    if isinstance(mats, np.ndarray) and mats.ndim == 2:
        raise ValueError(f"{name}: expected a list of L matrices (or an (L, k, k) array), "
                         "got a single matrix; wrap it in a list")
    arr = validate.real_array(name, mats if not isinstance(mats, (list, tuple)) else list(mats), 3)
    if arr.shape[0] < 1:
        raise ValueError(f"{name}: expected at least one layer")
    if arr.shape[1] != arr.shape[2]:
        raise ValueError(f"{name}: expected square matrices, got shape {arr.shape[1:]}")
    if size is not None and arr.shape[1] != size:
        raise ValueError(f"{name}: expected {size} x {size} matrices, got {arr.shape[1:]}")
    return arr


def _activation(activation):
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {ACTIVATIONS}, got {activation!r}")
    return activation


# =====================================================================================
# numpy forward
# =====================================================================================
def forward(Z0, P, Q, activation=None, return_all: bool = False):
    """The L-layer forward pass (eqs. 2-4), vectorised over prompts.

    ``Z_{l+1} = Z_l + (1/n) P_l Z_l M sigma(Z_l^T Q_l Z_l)`` with the mask ``M =
    diag(1, ..., 1, 0)`` and ``sigma`` the identity (linear attention) or ReLU (§6).

    Parameters
    ----------
    Z0 : array_like (B, d + 1, n + 1) or (d + 1, n + 1)
        Token matrices, tokens as columns, the query last (eq. 1).
    P, Q : sequence of L arrays (d + 1, d + 1), or arrays (L, d + 1, d + 1)
        Value and key-query matrices ``P_l = W_v``, ``Q_l = W_k^T W_q``.
    activation : {None, "relu"}
        None: linear attention. ``"relu"``: entrywise ReLU on ``Z^T Q Z``.
    return_all : bool
        Also return every ``Z_l``.

    Returns
    -------
    ndarray (B, d + 1, n + 1)
        ``Z_L``; with ``return_all``, an array (L + 1, B, d + 1, n + 1) of ``Z_0..Z_L``.
    """
    Z = _tokens(Z0)
    k = Z.shape[1]
    P = _layer_stack("P", P, k)
    Q = _layer_stack("Q", Q, k)
    if P.shape[0] != Q.shape[0]:
        raise ValueError(f"Q: expected {P.shape[0]} layers like P, got {Q.shape[0]}")
    activation = _activation(activation)
    n = Z.shape[2] - 1
    out = [Z]
    for Pl, Ql in zip(P, Q):
        Zc = Z[:, :, :n]                                    # keys/values: the context columns
        if activation is None:
            G = Zc @ Zc.transpose(0, 2, 1)                  # Z M Z^T = Z_c Z_c^T
            upd = (Pl @ G @ Ql) @ Z                         # batched matmul: 5x an einsum's speed
        else:
            scores = Zc.transpose(0, 2, 1) @ (Ql @ Z)          # (B, n, n + 1)
            upd = Pl @ (Zc @ np.maximum(scores, 0.0))
        Z = Z + upd / n
        out.append(Z)
    return np.stack(out) if return_all else Z


def predict(Z0, P, Q, activation=None) -> np.ndarray:
    """``TF_L(Z_0) = -[Z_L]_{d+1, n+1}`` (eq. 4), shape (B,)."""
    Z = forward(Z0, P, Q, activation)
    return -Z[:, -1, -1]


def _square_stack(name: str, mats, d: int | None = None) -> np.ndarray:
    return _layer_stack(name, mats, d)


def sparse_layers(A_list) -> tuple[np.ndarray, np.ndarray]:
    """``(P, Q)`` of the sparse parametrisation, eq. 8.

    ``P_l = [[0, 0], [0, 1]] = E_{d+1,d+1}``, ``Q_l = -[[A_l, 0], [0, 0]]`` (minus sign).

    Parameters
    ----------
    A_list : sequence of L arrays (d, d), or an array (L, d, d)

    Returns
    -------
    P, Q : ndarrays (L, d + 1, d + 1)
    """
    A = _square_stack("A_list", A_list)
    L, d = A.shape[0], A.shape[1]
    P = np.zeros((L, d + 1, d + 1))
    P[:, d, d] = 1.0
    Q = np.zeros((L, d + 1, d + 1))
    Q[:, :d, :d] = -A
    return P, Q


def general_layers(A_list, B_list) -> tuple[np.ndarray, np.ndarray]:
    """``(P, Q)`` of the general parametrisation, eq. 11 (GD++).

    ``P_l = [[B_l, 0], [0, 1]]``, ``Q_l = [[A_l, 0], [0, 0]]`` (**no** minus sign).

    Parameters
    ----------
    A_list, B_list : sequences of L arrays (d, d), or arrays (L, d, d)
        ``B_{L-1}`` never reaches the prediction (footnote 4) but is part of ``P_{L-1}``.

    Returns
    -------
    P, Q : ndarrays (L, d + 1, d + 1)
    """
    A = _square_stack("A_list", A_list)
    B = _square_stack("B_list", B_list, A.shape[1])
    if B.shape[0] != A.shape[0]:
        raise ValueError(f"B_list: expected {A.shape[0]} layers like A_list, got {B.shape[0]}")
    L, d = A.shape[0], A.shape[1]
    P = np.zeros((L, d + 1, d + 1))
    P[:, :d, :d] = B
    P[:, d, d] = 1.0
    Q = np.zeros((L, d + 1, d + 1))
    Q[:, :d, :d] = A
    return P, Q


class GDResult(NamedTuple):
    """Result of :func:`preconditioned_gd`.

    Attributes
    ----------
    w : ndarray (B, d)
        The final iterate ``w_L``.
    prediction : ndarray (B,)
        ``<x_q, w_L>``.
    iterates : ndarray (L + 1, B, d)
        ``w_0 = 0, w_1, ..., w_L``.
    """

    w: np.ndarray
    prediction: np.ndarray
    iterates: np.ndarray


def _gd_data(data) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y_context)`` from Prompts or a pair ``(X, y)``."""
    if hasattr(data, "X") and hasattr(data, "y"):
        return np.asarray(data.X, dtype=np.float64), np.asarray(data.y, dtype=np.float64)[:, :-1]
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError("data: expected Prompts or a pair (X, y) with X (B, d, n + 1) and "
                         "y (B, n) or (B, n + 1)")
    X = validate.real_array("X", data[0], 3)
    y = validate.real_array("y", data[1], 2)
    n = X.shape[2] - 1
    if n < 1 or y.shape[0] != X.shape[0] or y.shape[1] not in (n, n + 1):
        raise ValueError(f"y: expected shape ({X.shape[0]}, {n}) or ({X.shape[0]}, {n + 1}) "
                         f"for X of shape {X.shape}, got {y.shape}")
    return X, y[:, :n]


def preconditioned_gd(data, A_list) -> GDResult:
    """Preconditioned gradient descent on the in-context least-squares risk (§3, Lemma 1).

    ``w_0 = 0``, ``w_{l+1} = w_l - A_l grad R(w_l)`` with ``R(w) = (1/2n) sum_{i<=n}
    (w^T x_i - y_i)^2`` and ``grad R(w) = S w - h``, ``S = (1/n) sum x_i x_i^T``, ``h =
    (1/n) sum y_i x_i`` (``= S w*`` for noiseless labels). The recursion is the one the
    paper prints; the sparse transformer (eq. 8) with matrices ``A_l`` computes it with
    ``A_l^T`` (pass the transposes to reproduce the forward pass).

    Parameters
    ----------
    data : Prompts or (X, y)
        ``X`` (B, d, n + 1) covariates as columns, the query last; ``y`` (B, n) context
        labels (a trailing query label column is ignored).
    A_list : sequence of L arrays (d, d), or an array (L, d, d)

    Returns
    -------
    GDResult
    """
    X, y = _gd_data(data)
    n = X.shape[2] - 1
    A = _square_stack("A_list", A_list, X.shape[1])
    Xc = X[:, :, :n]
    S = np.einsum("bdi,bei->bde", Xc, Xc) / n
    h = np.einsum("bdi,bi->bd", Xc, y) / n
    w = np.zeros_like(h)
    its = [w]
    for Al in A:
        grad = np.einsum("bde,be->bd", S, w) - h
        w = w - grad @ Al.T
        its.append(w)
    pred = np.einsum("bd,bd->b", X[:, :, n], w)
    return GDResult(w=w, prediction=pred, iterates=np.stack(its))


def dist_to_identity(M) -> np.ndarray:
    """``Dist(M, I) = min_a ||M - a I||_F / ||M||_F = ||M - (tr M / d) I||_F / ||M||_F`` (§4.3).

    Parameters
    ----------
    M : array_like (..., d, d)

    Returns
    -------
    ndarray (...)
    """
    M = validate.real_array("M", M, (2, 3, 4))
    if M.shape[-1] != M.shape[-2]:
        raise ValueError(f"M: expected square matrices, got shape {M.shape}")
    d = M.shape[-1]
    a = np.trace(M, axis1=-2, axis2=-1) / d
    R = M - a[..., None, None] * np.eye(d)
    return np.linalg.norm(R, axis=(-2, -1)) / np.linalg.norm(M, axis=(-2, -1))


# =====================================================================================
# torch
# =====================================================================================


class TokenBatch(NamedTuple):
    """Torch prompts: ``Z`` (B, d + 1, n + 1) token matrices (query label 0) and the query
    targets ``y_q`` (B,)."""

    Z: "torch.Tensor"
    y_q: "torch.Tensor"


def sample_tokens_torch(Sigma, n: int, batch: int, *, generator, task: str = "inverse",
                        device=None, chol=None) -> TokenBatch:
    """Draw prompts of the Ahn et al. data model in torch (float64).

    The Gaussians are drawn in float32 and cast
    (:func:`verify.models.linear_attention.standard_normal`, about 5x faster).

    ``x^(1..n+1) ~ N(0, Sigma)`` through a Cholesky factor ``C`` (``Sigma = C C^T``),
    ``w* = C^{-T} g ~ N(0, Sigma^{-1})`` (``task="inverse"``, Theorems 3-4) or ``w* = g ~
    N(0, I)`` (``task="identity"``), noiseless labels. Same law as
    :func:`verify.tasks.preconditioned_gd.sample_prompts`, drawn from a ``torch.Generator``.

    Parameters
    ----------
    Sigma : array_like
        d x d SPD covariance or its eigenvalues (ignored when ``chol`` is given).
    n, batch : int
        Context length (query excluded) and number of prompts.
    generator : torch.Generator
    task : {"inverse", "identity"}
    device : optional
        Defaults to the generator's device.
    chol : Tensor (d, d), optional
        Precomputed lower Cholesky factor on ``device``.
    """
    from .linear_attention import standard_normal

    n = validate.integer("n", n)
    batch = validate.integer("batch", batch)
    generator = validate.generator(generator)
    if task not in ("inverse", "identity"):
        raise ValueError(f"task: expected 'inverse' or 'identity', got {task!r}")
    device = torch.device(device) if device is not None else generator.device
    if chol is None:
        chol = torch.as_tensor(np.linalg.cholesky(validate.covariance("Sigma", Sigma)), dtype=torch.float64,
                               device=device)
    d = chol.shape[0]
    g = standard_normal((batch, n + 1, d), generator, device, chol.dtype)
    u = standard_normal((batch, d), generator, device, chol.dtype)
    # Every token (x; y) is a linear image of its g: x = C g and y = w^T x, with w^T C = u^T
    # (task "inverse": w = C^{-T} u, so y = u^T g) or u^T C ("identity": w = u). So the tokens,
    # as rows, are one batched product g [C^T, c] with c = u or C^T u: about 2.5 (float64) to
    # 3.5 (float32) times faster than an einsum for x and a reduction for y.
    c = u if task == "inverse" else u @ chol
    W = g @ torch.cat([chol.T.expand(batch, d, d), c[:, :, None]], dim=2)     # (B, n + 1, d + 1)
    y_q = W[:, n, d].clone()
    W[:, n, d] = 0.0
    return TokenBatch(W.transpose(1, 2), y_q)                      # tokens as columns (a view)


if torch is not None:

    class LinearTransformer(nn.Module):
        """L-layer linear transformer (eqs. 2-4) on full token matrices, masked, float64.

        Parameters
        ----------
        d : int
            Covariate dimension (tokens have ``d + 1`` rows).
        L : int
            Number of layers.
        parametrisation : {"full", "sparse", "gdpp"}
            ``"full"``: every entry of ``P_l, Q_l`` ((d+1) x (d+1)) trainable.
            ``"sparse"`` (eq. 8): ``P_l = E_{d+1,d+1}``, ``Q_l = -[[A_l, 0], [0, 0]]``, only
            ``A_l`` trainable. ``"gdpp"`` (eq. 11): ``P_l = [[B_l, 0], [0, 1]]``, ``Q_l =
            [[A_l, 0], [0, 0]]``, ``A_l, B_l`` trainable, ``[P_l]_{d+1,d+1} = 1`` fixed.
        dtype, device
            Default float64 on the CPU.

        Attributes
        ----------
        P, Q : Parameter (L, d+1, d+1)    ("full")
        A : Parameter (L, d, d)           ("sparse", "gdpp")
        B : Parameter (L, d, d)           ("gdpp")
        """

        def __init__(self, d: int, L: int, parametrisation: str = "full", *,
                     dtype=torch.float64, device=None):
            super().__init__()
            self.d = validate.integer("d", d)
            self.L = validate.integer("L", L)
            if parametrisation not in PARAMETRISATIONS:
                raise ValueError(f"parametrisation: expected one of {PARAMETRISATIONS}, "
                                 f"got {parametrisation!r}")
            self.parametrisation = parametrisation
            opts = dict(dtype=dtype, device=device)
            k = self.d + 1
            if parametrisation == "full":
                self.P = nn.Parameter(torch.zeros(self.L, k, k, **opts))
                self.Q = nn.Parameter(torch.zeros(self.L, k, k, **opts))
            else:
                self.A = nn.Parameter(torch.zeros(self.L, self.d, self.d, **opts))
                if parametrisation == "gdpp":
                    self.B = nn.Parameter(torch.zeros(self.L, self.d, self.d, **opts))

        def extra_repr(self) -> str:
            return f"d={self.d}, L={self.L}, parametrisation={self.parametrisation!r}"

        # -- weights ---------------------------------------------------------------
        def matrices(self):
            """``(P, Q)``, tensors (L, d+1, d+1) (differentiable)."""
            if self.parametrisation == "full":
                return self.P, self.Q
            d, L = self.d, self.L
            ref = self.A
            P = torch.zeros(L, d + 1, d + 1, dtype=ref.dtype, device=ref.device)
            P[:, d, d] = 1.0
            if self.parametrisation == "gdpp":
                P = P + nn.functional.pad(self.B, (0, 1, 0, 1))
                Q = nn.functional.pad(self.A, (0, 1, 0, 1))
            else:
                Q = nn.functional.pad(-self.A, (0, 1, 0, 1))
            return P, Q

        def init_(self, generator, std: float) -> "LinearTransformer":
            """i.i.d. ``N(0, std^2)`` entries for every trainable matrix, in place."""
            generator = validate.generator(generator)
            std = validate.nonnegative("std", std)
            with torch.no_grad():
                for p in self.parameters():
                    p.copy_(torch.randn(p.shape, generator=generator, device=generator.device,
                                        dtype=p.dtype).to(p.device) * std)
            return self

        def load_(self, A=None, B=None, P=None, Q=None) -> "LinearTransformer":
            """Set weights from arrays: ``A`` (and ``B``) for "sparse"/"gdpp", ``P, Q`` for
            "full" (shapes (L, d, d) and (L, d+1, d+1))."""
            def put(name, value, param, shape):
                arr = validate.real_array(name, value.detach().cpu().numpy()
                                if isinstance(value, torch.Tensor) else value, 3)
                if arr.shape != shape:
                    raise ValueError(f"{name}: expected shape {shape}, got {arr.shape}")
                with torch.no_grad():
                    param.copy_(torch.as_tensor(arr, dtype=param.dtype, device=param.device))

            d, L = self.d, self.L
            if self.parametrisation == "full":
                if A is not None or B is not None or P is None or Q is None:
                    raise ValueError("P: the full parametrisation is loaded from P and Q")
                put("P", P, self.P, (L, d + 1, d + 1))
                put("Q", Q, self.Q, (L, d + 1, d + 1))
                return self
            if P is not None or Q is not None or A is None:
                raise ValueError(f"A: the {self.parametrisation} parametrisation is loaded "
                                 "from A (and B)")
            put("A", A, self.A, (L, d, d))
            if self.parametrisation == "gdpp":
                if B is None:
                    raise ValueError("B: required for the gdpp parametrisation")
                put("B", B, self.B, (L, d, d))
            elif B is not None:
                raise ValueError("B: the sparse parametrisation has no B")
            return self

        # -- forward ---------------------------------------------------------------
        def forward(self, Z):
            """``Z_L`` from token matrices ``Z`` (B, d+1, n+1) (eqs. 2-4, masked).

            "full": ``Z + (1/n) P (Z_c Z_c^T) Q Z`` per layer. "sparse"/"gdpp": the block
            recursions of eq. 57, ``X <- X + (1/n) B X_c X_c^T A X``, ``Y <- Y + (1/n) Y_c
            X_c^T A X`` (``-A`` for "sparse"; ``X`` fixed), the same function.
            """
            self._check_tokens(Z)
            n = Z.shape[2] - 1
            d = self.d
            if self.parametrisation == "full":
                for Pl, Ql in zip(self.P, self.Q):
                    Zc = Z[:, :, :n]
                    G = Zc @ Zc.transpose(1, 2)
                    Z = Z + (Pl @ G @ Ql @ Z) / n
                return Z
            X, Y = Z[:, :d, :], Z[:, d, :]
            for l in range(self.L):
                Xc = X[:, :, :n]
                Al = self.A[l] if self.parametrisation == "gdpp" else -self.A[l]
                v = (Xc * Y[:, None, :n]).sum(-1) @ Al             # Y_c X_c^T A_l, (B, d)
                dY = (v[:, :, None] * X).sum(1)                    # (B, n + 1)
                if self.parametrisation == "gdpp":
                    K = self.B[l] @ (Xc @ Xc.transpose(1, 2))      # B_l X_c X_c^T
                    X = X + (K @ Al @ X) / n
                Y = Y + dY / n
            return torch.cat([X, Y[:, None, :]], dim=1)

        def predict(self, Z):
            """``TF_L = -[Z_L]_{d+1, n+1}``, shape (B,), by the Gram recursion.

            A linear layer acts on every column of ``Z`` with the same matrix, ``Z_{l+1} =
            (I + (1/n) P_l G_l Q_l) Z_l = T_l Z_l`` with ``G_l = Z_{l,c} Z_{l,c}^T`` (the mask
            only enters ``G``). So the query column and the Gram matrix of the context evolve
            on their own: ``z_{q,l+1} = T_l z_{q,l}``, ``G_{l+1} = T_l G_l T_l^T``. This is the
            same function of the full token matrices and of every trained entry as
            :meth:`forward` (a test compares values and gradients), at ``O((d+1)^3)`` per
            prompt and layer instead of ``O(n (d+1)^2)``; the last two layers need matrix-vector
            products only (``_predict_gram``). "sparse" and "gdpp" (``L >= 2``) run the same
            recursion in the blocks of eq. 11 (``_predict_blocks``).
            """
            self._check_tokens(Z)
            if self.parametrisation == "sparse":
                return _predict_blocks(self.A, None, Z, sign=-1.0)
            if self.parametrisation == "gdpp" and self.L >= 2:
                return _predict_blocks(self.A, self.B, Z)
            P, Q = self.matrices()
            return _predict_gram(P, Q, Z)

        def _check_tokens(self, Z):
            if not isinstance(Z, torch.Tensor) or Z.ndim != 3 or Z.shape[1] != self.d + 1 \
                    or Z.shape[2] < 2:
                got = tuple(Z.shape) if isinstance(Z, torch.Tensor) else type(Z).__name__
                raise ValueError(f"Z: expected a tensor of shape (B, {self.d + 1}, n + 1), "
                                 f"got {got}")

        # -- read-offs -------------------------------------------------------------
        def A_matrices(self) -> np.ndarray:
            """Preconditioners in the eq.-8 convention (``Q_l = -[[A_l, 0], [0, 0]]`` with
            ``[P_l]_{d+1,d+1} = 1``), numpy (L, d, d).

            "sparse": ``A_l``; "gdpp": ``-A_l`` (eq. 11 carries no minus sign); "full": the
            layer rescaled to ``[P_l]_{d+1,d+1} = 1`` (``P -> P/p``, ``Q -> p Q`` leaves the
            layer unchanged), ``-p_l [Q_l]_{1:d,1:d}``.
            """
            with torch.no_grad():
                if self.parametrisation == "sparse":
                    A = self.A
                elif self.parametrisation == "gdpp":
                    A = -self.A
                else:
                    A = -self.P[:, self.d, self.d, None, None] * self.Q[:, :self.d, :self.d]
                return A.detach().cpu().numpy().astype(np.float64)

        def B_matrices(self) -> np.ndarray:
            """``B_l`` of eq. 11, numpy (L, d, d): "gdpp" ``B_l``; "full" ``[P_l]_{1:d,1:d} /
            [P_l]_{d+1,d+1}``; "sparse" zeros."""
            with torch.no_grad():
                if self.parametrisation == "gdpp":
                    B = self.B
                elif self.parametrisation == "full":
                    B = self.P[:, :self.d, :self.d] / self.P[:, self.d, self.d, None, None]
                else:
                    B = torch.zeros_like(self.A)
                return B.detach().cpu().numpy().astype(np.float64)

        def off_block_norms(self) -> dict:
            """Norms of the blocks outside eq. 11 (``"full"`` only; zeros otherwise), per
            layer rescaled to ``[P_l]_{d+1,d+1} = 1`` and summed over layers (Frobenius).

            ``"P last row"`` = ``P[d+1, 1:d]`` and ``"Q last row"`` = ``Q[d+1, 1:d]`` reach the
            output (zero at the single-layer optimum); ``"P last column"`` =
            ``P[1:d, d+1]`` and ``"Q last column"`` = ``Q[:, d+1]`` do not for ``L = 1``.
            """
            names = ("P last row", "Q last row", "P last column", "Q last column")
            if self.parametrisation != "full":
                return dict.fromkeys(names, 0.0)
            d = self.d
            with torch.no_grad():
                p = self.P[:, d, d][:, None]
                blocks = (self.P[:, d, :d] / p, self.Q[:, d, :d] * p, self.P[:, :d, d] / p,
                          self.Q[:, :, d] * p)
                return {k: float(torch.linalg.norm(b)) for k, b in zip(names, blocks)}


    def _bmm(X, Y):
        """``X @ Y`` for stacks of small matrices, by numpy's ``matmul`` on the CPU when no
        gradient is tracked (its own loop for small matrices: at batch 500 and 6 x 6 matrices 30
        microseconds whatever the number of rows of ``X``, where torch's ``bmm`` takes 20 per
        row), else torch's. Equal to ``X @ Y`` to round-off. (Not for long inner dimensions:
        numpy's matmul is the slower for the context Gram matrix, ``n = 20``.)"""
        if X.device.type == "cpu" and not (X.requires_grad or Y.requires_grad):
            return torch.from_numpy(np.matmul(X.numpy(), Y.numpy()))
        return X @ Y

    def _prompt_blocks(Z, d: int):
        """The blocks of a batch of prompts ``Z`` (B, d+1, n+1) that the block recursions read:
        ``(S, s, x, y)`` with ``G = Zc Zc^T / n = [[S, s], [s^T, .]]`` over the ``n`` context
        columns (``s`` as rows), and the query column ``z_q = (x, y)``."""
        n = Z.shape[2] - 1
        Zc = Z[:, :, :n]
        G = (Zc @ Zc.transpose(1, 2)) / n
        return G[:, :d, :d], G[:, d, :d], Z[:, :d, n], Z[:, d, n]

    def _predict_blocks(A, B, Z, sign: float = 1.0):
        """``-[Z_L]_{d+1, n+1}`` of the block parametrisations (see
        :meth:`LinearTransformer.predict`): eq. 11 with ``Q_l = sign [[A_l, 0], [0, 0]]``, ``P_l =
        [[B_l, 0], [0, 1]]``; ``B = None`` is ``B_l = 0`` (with ``sign = -1``: the sparse eq. 8).
        ``A, B`` (L, d, d), ``Z`` (B, d+1, n+1).

        In blocks ``G = [[S, s], [s^T, .]]`` (``G`` carrying ``1/n``), ``z_q = (x, y)`` and ``T_l =
        [[M_l, 0], [c^T, 1]]`` with ``M_l = I + B_l S A_l``, ``c = A_l^T s`` (``A_l`` with its sign),
        a layer is ``y <- y + s^T A_l x``, ``x <- M_l x``, ``s <- M_l (S A_l^T s + s)``, ``S <- M_l
        S M_l^T`` (for ``B_l = 0``: Lemma 1's preconditioned gradient step, ``M_l = I``). Only
        ``y`` of the last layer and ``x, s`` of the one before reach the prediction, so ``S`` is
        updated (a product per prompt) only before the last two layers; the rest are
        matrix-vector products, about half the time of :func:`_predict_gram` for the sparse
        ``L = 2`` at batch 750 (forward and backward)."""
        L, d = A.shape[0], A.shape[1]
        S, s, x, y = _prompt_blocks(Z, d)                           # rows: s^T, x^T
        for l in range(L):
            Al = A[l] if sign == 1.0 else sign * A[l]
            t = s @ Al                                              # (A_l^T s)^T
            y = y + (t * x).sum(-1)                                 # + s^T A_l x
            if l == L - 1:
                break
            s = s + (S @ t[:, :, None])[:, :, 0]                    # S A_l^T s + s
            if B is not None:
                K = B[l] @ S @ Al if l < L - 2 else None            # M_l - I (needed for S only)
                W = torch.stack([x, s], dim=2)                      # (B, d, 2): M_l (x, s)
                W = W + B[l] @ (S @ (Al @ W))
                x, s = W[:, :, 0], W[:, :, 1]
                if K is not None:
                    SM = S + S @ K.transpose(1, 2)                  # S M^T
                    S = SM + K @ SM
        return -y

    def _sparse_loss_grad(A, Z, y_q):
        """Batch loss ``mean (TF_L - y_q)^2`` of the sparse parametrisation (eq. 8, any ``L``) and
        its gradient with respect to ``A``, in closed form (no autograd); the prediction is
        :func:`_predict_blocks`'s to round-off. Returns ``(loss, grad_A)``.

        Per prompt (rows; ``G = [[S, s], [s^T, .]]`` carrying ``1/n``, ``z_q = (x, y)``, ``C_l =
        -A_l``): Lemma 1's recursion ``s_{l+1} = s_l + S C_l^T s_l``, ``TF = -(y + sum_l s_l^T C_l
        x)``. With the adjoint ``lambda_L = 0``, ``u_l = x + S lambda_{l+1}``, ``lambda_l =
        lambda_{l+1} + C_l u_l``: ``dTF/dC_l = -s_l u_l^T``, so ``dTF/dA_l = s_l u_l^T``, and the
        gradient is ``sum_b delta_b s_l u_l^T`` with ``delta = 2 (TF - y_q) / B``. The same loss
        as autograd's and its gradient to round-off (a test compares them), about 0.6 times the
        time of the autograd pass for ``L = 2`` at batch 750 (float32)."""
        L, d = A.shape[0], A.shape[1]
        S, s, x, y = _prompt_blocks(Z, d)                           # rows: s^T, x^T
        C = -1.0 * A
        states = []
        for l in range(L):                                          # as _predict_blocks
            Cl = C[l]
            states.append(s)
            t = s @ Cl                                              # (C_l^T s)^T
            y = y + (t * x).sum(-1)
            if l == L - 1:
                break
            s = s + _bmm(S, t[:, :, None])[:, :, 0]
        pred = -y
        delta = 2.0 * (pred - y_q) / pred.shape[0]
        loss = torch.mean((pred - y_q) ** 2)
        grad = torch.empty_like(A)
        u, lam = x, None
        for l in range(L - 1, -1, -1):
            if lam is not None:
                u = x + _bmm(S, lam[:, :, None])[:, :, 0]           # x + S lambda_{l+1}
            grad[l] = (delta[:, None] * states[l]).T @ u
            if l > 0:
                step = u @ C[l].T                                   # (C_l u)^T
                lam = step if lam is None else lam + step
        return loss, grad

    def _gdpp2_loss_grad(A, B, Z, y_q):
        """Batch loss ``mean (TF_L - y_q)^2`` of the GD++ parametrisation (eq. 11) with ``L = 2``
        and its gradients with respect to ``A`` and ``B``, in closed form (no autograd); the
        prediction is :func:`_predict_blocks`'s to round-off. Returns ``(loss, grad_A,
        grad_B)``; ``grad_B[1] = 0`` (``B_1`` never reaches the prediction, footnote 4).

        Per prompt (rows; ``G = [[S, s], [s^T, .]]`` carrying ``1/n``, ``z_q = (x, y)``): ``TF =
        -(y + s^T A_0 x + s_1^T A_1 x_1)`` with ``v = s + S A_0^T s``, ``M = I + B_0 S A_0``,
        ``x_1 = M x``, ``s_1 = M v``. With ``p = A_1 x_1``, ``q = A_1^T s_1`` and ``p' = M^T p``:
        ``dTF/dA_1 = -s_1 x_1^T``, ``dTF/dB_0 = -(p (S A_0 v)^T + q (S A_0 x)^T)``, ``dTF/dA_0 =
        -(s (x + S p')^T + (S B_0^T p) v^T + (S B_0^T q) x^T)``; the gradients are ``sum_b
        delta_b dTF_b`` with ``delta = 2 (TF - y_q) / B``. The same loss as autograd's and its
        gradients to round-off (a test compares them), about 0.55 times the time of the autograd
        pass at batch 1000 (float32)."""
        if A.shape[0] != 2:
            raise ValueError(f"A: expected L = 2 layers, got {A.shape[0]}")
        d = A.shape[1]
        S, s, x, y = _prompt_blocks(Z, d)
        A0, A1, B0 = A[0], A[1], B[0]
        t = s @ A0                                                  # (A_0^T s)^T
        y = y + (t * x).sum(-1)                                     # + s^T A_0 x
        v = s + _bmm(S, t[:, :, None])[:, :, 0]                     # s + S A_0^T s
        R = torch.stack([x, v], dim=1)                              # rows (B, 2, d)
        SAR = _bmm(R @ A0.T, S)                                     # rows S A_0 x, S A_0 v
        R = R + SAR @ B0.T                                          # rows x_1 = M x, s_1 = M v
        x1, s1 = R[:, 0], R[:, 1]
        q = s1 @ A1                                                 # (A_1^T s_1)^T
        y = y + (q * x1).sum(-1)                                    # + s_1^T A_1 x_1
        pred = -y
        delta = 2.0 * (pred - y_q) / pred.shape[0]
        loss = torch.mean((pred - y_q) ** 2)
        p = x1 @ A1.T                                               # (A_1 x_1)^T
        SBU = _bmm(torch.stack([q, p], dim=1) @ B0, S)              # rows S B_0^T q, S B_0^T p
        SBq, SBp = SBU[:, 0], SBU[:, 1]
        p_prime = p + SBp @ A0                                      # (M^T p)^T
        Spp = _bmm(S, p_prime[:, :, None])[:, :, 0]
        grad_A, grad_B = torch.zeros_like(A), torch.zeros_like(B)
        ds = delta[:, None]
        grad_A[1] = -((ds * s1).T @ x1)
        left = torch.stack([s, SBp, SBq], dim=1) * ds[:, :, None]   # (B, 3, d)
        right = torch.stack([x + Spp, v, x], dim=1)
        grad_A[0] = -(left.reshape(-1, d).T @ right.reshape(-1, d))
        left = torch.stack([q, p], dim=1) * ds[:, :, None]          # pairs with (S A_0 x, S A_0 v)
        grad_B[0] = -(left.reshape(-1, d).T @ SAR.reshape(-1, d))
        return loss, grad_A, grad_B

    def _full_loss_grad(P, Q, Z, y_q):
        """Batch loss ``mean (TF_L - y_q)^2`` of the full parametrisation with ``L = 1`` or ``2``
        and its gradients with respect to ``P`` and ``Q``, in closed form (no autograd); the
        prediction of :func:`_predict_gram`. Returns ``(loss, grad_P, grad_Q)``.

        Per prompt (rows, ``G`` carrying ``1/n``; ``T = I + P_0 G Q_0``, ``r^T`` the last row of
        ``P_{L-1}``, ``delta = 2 (TF - y_q) / B``). ``L = 1``: ``TF = -(e^T z_q + r^T G Q_0
        z_q)``, so ``dTF/dr = -G Q_0 z_q`` and ``dTF/dQ_0 = -(G r) z_q^T``. ``L = 2``: ``TF = -(e^T
        z_1 + a^T G b)`` with ``z_1 = T z_q``, ``a = T^T r``, ``b_0 = Q_1 z_1``, ``b = T^T b_0``;
        with ``h = G b`` and ``k = G a``: ``dTF/dr = -T h``, ``dTF/dQ_1 = -(T k) z_1^T``, and
        ``dTF = sum alpha^T dT beta`` over the pairs ``(g_1, z_q)``, ``(-r, h)``, ``(-b_0, k)``,
        ``g_1 = -(e + Q_1^T T k)``, which gives ``dTF/dP_0 = sum alpha (G Q_0 beta)^T`` and
        ``dTF/dQ_0 = sum (G P_0^T alpha) beta^T``. The gradients are ``sum_b delta_b dTF_b``.
        About half the time of the autograd pass for ``L = 2`` at batch 500 (a test compares
        both with autograd)."""
        n = Z.shape[2] - 1
        Zc = Z[:, :, :n]
        G = (Zc @ Zc.transpose(1, 2)) / n                           # (B, D, D), symmetric
        zq = Z[:, :, n]                                             # (B, D)
        Bt, D = zq.shape
        L = P.shape[0]
        gP, gQ = torch.zeros_like(P), torch.zeros_like(Q)

        def rows_G(X):                                              # rows X_b G_b, X (B, k, D)
            return _bmm(X, G)

        if L == 1:
            r = P[0, -1]
            u = rows_G((zq @ Q[0].T)[:, None, :])[:, 0]             # (G Q_0 z_q)^T
            pred = -(zq[:, -1] + u @ r)
            delta = 2.0 * (pred - y_q) / Bt
            loss = torch.mean((pred - y_q) ** 2)
            gP[0, -1] = -(delta @ u)
            Gr = rows_G(r.expand(Bt, 1, D))[:, 0]                   # (G r)^T
            gQ[0] = -((delta[:, None] * Gr).T @ zq)
            return loss, gP, gQ
        P0, Q0, P1, Q1 = P[0], Q[0], P[1], Q[1]
        r = P1[-1]
        # the products with G of a stage in one batched product (their rows stacked)
        R = rows_G(torch.stack([zq @ Q0.T, (r @ P0).expand(Bt, D)], dim=1))   # G Q_0 z_q, G P_0^T r
        z1 = zq + R[:, 0] @ P0.T                                    # T z_q
        a = r + R[:, 1] @ Q0                                        # T^T r
        b0 = z1 @ Q1.T
        R = rows_G(torch.stack([b0 @ P0, a], dim=1))                # G P_0^T b_0, k = G a
        b = b0 + R[:, 0] @ Q0                                       # T^T b_0
        k = R[:, 1]
        h = rows_G(b[:, None, :])[:, 0]                             # G b
        pred = -(z1[:, -1] + (a * h).sum(-1))
        delta = 2.0 * (pred - y_q) / Bt
        loss = torch.mean((pred - y_q) ** 2)
        hk = torch.stack([h, k], dim=1)
        Thk = hk + rows_G(hk @ Q0.T) @ P0.T                         # (T h, T k)
        Th, Tk = Thk[:, 0], Thk[:, 1]
        gP[1, -1] = -(delta @ Th)
        gQ[1] = -((delta[:, None] * Tk).T @ z1)
        g1 = -(Tk @ Q1)
        g1[:, -1] -= 1.0
        alpha = torch.stack([g1, -r.expand(Bt, D), -b0], dim=1) * delta[:, None, None]
        beta = torch.stack([zq, h, k], dim=1)                       # (B, 3, D)
        R = rows_G(torch.cat([beta @ Q0.T, alpha @ P0], dim=1))     # (G Q_0 beta, G P_0^T alpha)
        gP[0] = alpha.reshape(-1, D).T @ R[:, :3].reshape(-1, D)
        gQ[0] = R[:, 3:].reshape(-1, D).T @ beta.reshape(-1, D)
        return loss, gP, gQ

    def _predict_gram(P, Q, Z):
        """``-[Z_L]_{d+1, n+1}`` from the query column and the context Gram matrix (see
        :meth:`LinearTransformer.predict`); ``P, Q`` (L, d+1, d+1), ``Z`` (B, d+1, n+1).

        Layers before the last two update ``G`` and ``z_q`` explicitly (batched products).
        The last two never form a matrix product: with ``T = I + P_0 G Q_0`` (``G`` carrying
        ``1/n``) and ``r^T`` the last row of ``P_1``, the prediction is
        ``-(e^T z_1 + (T^T r)^T G (T^T Q_1 z_1))``, ``z_1 = T z_q``, ``T^T v = v + Q_0^T G
        P_0^T v``: matrix-vector products only, fewer and cheaper autograd nodes (about
        2.5 times faster than forming ``G_1`` for ``L = 2``, batch 500, ``d = 5``)."""
        n = Z.shape[2] - 1
        Zc = Z[:, :, :n]
        G = (Zc @ Zc.transpose(1, 2)) / n                           # (B, D, D), carries 1/n
        zq = Z[:, :, n]                                             # (B, D)
        L = P.shape[0]

        def G_times(v):                                             # G v per prompt, v (B, D)
            return (G @ v[:, :, None])[:, :, 0]

        for l in range(L - 2):                                      # G <- T G T^T, z_q <- T z_q
            T = P[l] @ G @ Q[l] + torch.eye(G.shape[-1], dtype=G.dtype, device=G.device)
            G = T @ G @ T.transpose(1, 2)
            zq = (T @ zq[:, :, None])[:, :, 0]
        if L >= 2:
            P0, Q0, P1, Q1 = P[L - 2], Q[L - 2], P[L - 1], Q[L - 1]
            z1 = zq + G_times(zq @ Q0.T) @ P0.T                     # T z_q

            def T_transpose(v):                                     # v + Q_0^T G P_0^T v
                return v + G_times(v @ P0) @ Q0

            a = T_transpose(P1[-1].expand(zq.shape[0], -1))
            b = T_transpose(z1 @ Q1.T)
            return -(z1[:, -1] + (a * G_times(b)).sum(-1))
        return -(zq[:, -1] + (G_times(zq @ Q[0].T) * P[0, -1]).sum(-1))


# =====================================================================================
# Training
# =====================================================================================
@dataclass
class TrainResult:
    """Record of an Adam run (:func:`train_adam`).

    Attributes
    ----------
    step : ndarray of int
        Logged steps (0 is the initialisation).
    batch_loss : ndarray
        Mean squared error ``mean (TF_L - y_q)^2`` of the batch at each logged step (NaN at 0).
    lr : ndarray
        Learning rate at each logged step.
    A_log, B_log : ndarray (T, L, d, d)
        :meth:`LinearTransformer.A_matrices` / ``B_matrices`` at each logged step.
    seconds : float
        Wall time of the run.
    settings : dict
        The optimiser settings used.
    stopped_at : int or None
        The step whose batch loss was non-finite or above ``stop_above`` (the run stopped
        there, before the optimiser step; that loss is the last logged one); None if it ran
        to the end.
    stalled_at : int or None
        The step ``stall[0]`` when the run stopped there for a mean batch loss above
        ``stall[1]`` (:func:`train_adam`); None otherwise.
    """

    step: np.ndarray
    batch_loss: np.ndarray
    lr: np.ndarray
    A_log: np.ndarray = field(repr=False)
    B_log: np.ndarray = field(repr=False)
    seconds: float
    settings: dict = field(default_factory=dict)
    stopped_at: int | None = None
    stalled_at: int | None = None


def train_adam(model, Sigma, n: int, *, steps: int, batch: int, lr: float, generator,
               optimizer: str = "adam", betas=(0.9, 0.999), weight_decay: float = 0.0,
               halve_every: int | None = None, clip: float | None = None,
               resample_every: int = 1, task: str = "inverse", log_every: int = 10,
               device=None, threads: int | None = 1, compile: bool = False,
               stop_above: float | None = None, stall: tuple[int, float] | None = None,
               iterate: Callable[[Iterable, str], Iterable] | None = None) -> TrainResult:
    """Train a :class:`LinearTransformer` with Adam/AdamW on freshly sampled prompts (§4.3, §5.1).

    Each step takes the loss ``mean (TF_L - y_q)^2`` on a batch (eq. 5, no 1/2); a new
    batch is drawn every ``resample_every`` steps (the paper: every 100; 1 = online).
    Before each step the gradient of every layer's matrix (each ``A_l``, ``B_l``, ``P_l``,
    ``Q_l`` separately) is clipped to Frobenius norm ``clip`` (the paper clips at 0.01);
    the learning rate is halved every ``halve_every`` steps. Not compiled, the full
    parametrisation with ``L <= 2``, the sparse one and GD++ with ``L = 2`` take the loss and its
    gradient in closed form (``_full_loss_grad``, ``_sparse_loss_grad``, ``_gdpp2_loss_grad``,
    equal to autograd's to round-off), the rest by autograd.

    Parameters
    ----------
    model : LinearTransformer
        Trained in place (moved to ``device``).
    Sigma : array_like
        Covariance of the covariates (d x d SPD or eigenvalues).
    n : int
        Context length.
    steps, batch : int
    lr : float
        Initial learning rate.
    generator : torch.Generator
        The only source of randomness (on ``device``).
    optimizer : {"adam", "adamw"}
    betas : pair of floats
        Adam moments (the authors' notebooks: ``(0.99, 0.9)``).
    weight_decay : float
    halve_every : int, optional
    clip : float, optional
    resample_every : int
    task : {"inverse", "identity"}
        ``w* ~ N(0, Sigma^{-1})`` (Theorems 3-4) or ``N(0, I)``.
    log_every : int
    device : optional
        Defaults to the generator's device.
    threads : int or None
        CPU threads during the run (tiny matrices: one thread is fastest); None: unchanged.
    compile : bool
        Evaluate the batch loss through ``torch.compile`` (fuses the Gram recursion of
        :meth:`LinearTransformer.predict`; ~25 s to compile, then ~3x faster per step on a
        CPU at batch 20000). Needs a C++ compiler (CPU) or Triton (GPU).
    stop_above : float, optional
        Stop the run (``TrainResult.stopped_at``) at the first batch loss above this value;
        a non-finite batch loss always stops it (every step reads its loss back: one device
        synchronisation per step).
    stall : (int, float), optional
        ``(step, loss)``: at ``step``, stop the run (``TrainResult.stalled_at``) when the mean
        batch loss of the last ``max(1, step // 10)`` steps is above ``loss`` (a run still on a
        plateau, e.g. at a saddle, that the caller may restart).
    iterate : callable, optional
        ``iterate(range, desc)`` progress wrapper.
    """
    if torch is None:  # pragma: no cover
        raise ValueError("model: torch is not installed")
    if not isinstance(model, LinearTransformer):
        raise ValueError(f"model: expected a LinearTransformer, got {type(model).__name__}")
    n = validate.integer("n", n)
    steps = validate.integer("steps", steps, low=0)
    batch = validate.integer("batch", batch)
    lr = validate.positive("lr", lr)
    generator = validate.generator(generator)
    if optimizer not in ("adam", "adamw"):
        raise ValueError(f"optimizer: expected 'adam' or 'adamw', got {optimizer!r}")
    try:
        b1, b2 = (float(b) for b in betas)
    except (TypeError, ValueError):
        raise ValueError(f"betas: expected two numbers in [0, 1), got {betas!r}") from None
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ValueError(f"betas: expected two numbers in [0, 1), got {betas!r}")
    weight_decay = validate.nonnegative("weight_decay", weight_decay)
    if halve_every is not None:
        halve_every = validate.integer("halve_every", halve_every)
    if clip is not None:
        clip = validate.positive("clip", clip)
    resample_every = validate.integer("resample_every", resample_every)
    log_every = validate.integer("log_every", log_every)
    if stop_above is not None:
        stop_above = validate.positive("stop_above", stop_above)
    if stall is not None:
        try:
            stall_step, stall_loss = stall
        except (TypeError, ValueError):
            raise ValueError(f"stall: expected a pair (step, loss), got {stall!r}") from None
        stall = (validate.integer("stall step", stall_step), validate.positive("stall loss", stall_loss))
    lam = validate.covariance("Sigma", Sigma)
    if lam.shape[0] != model.d:
        raise ValueError(f"Sigma: dimension {lam.shape[0]} does not match the model's d = {model.d}")
    device = torch.device(device) if device is not None else generator.device
    if device.type != generator.device.type:
        raise ValueError(f"generator: on {generator.device}, but device is {device}")
    model.to(device)
    dtype = next(model.parameters()).dtype                  # prompts in the model's precision
    chol = torch.as_tensor(np.linalg.cholesky(lam), dtype=dtype, device=device)
    opt_cls = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
    opt = opt_cls(model.parameters(), lr=lr, betas=(b1, b2), weight_decay=weight_decay)
    sched = (torch.optim.lr_scheduler.StepLR(opt, step_size=halve_every, gamma=0.5)
             if halve_every else None)
    params = list(model.parameters())
    if not isinstance(compile, bool):
        raise ValueError(f"compile: expected True or False, got {compile!r}")

    def batch_loss(Z, y_q):
        return torch.mean((model.predict(Z) - y_q) ** 2)

    if compile:
        batch_loss = torch.compile(batch_loss)
    # loss and gradients in closed form: the full parametrisation with one or two layers, the
    # sparse one, GD++ with two layers
    closed_form = not compile and {"full": model.L <= 2, "sparse": True, "gdpp": model.L == 2}[model.parametrisation]

    log_step, log_loss, log_lr, A_log, B_log = [], [], [], [], []

    def log(k, loss):
        log_step.append(k)
        log_loss.append(loss)
        log_lr.append(opt.param_groups[0]["lr"])
        A_log.append(model.A_matrices())
        B_log.append(model.B_matrices())

    old_threads = torch.get_num_threads()
    if threads is not None and device.type == "cpu":
        torch.set_num_threads(validate.integer("threads", threads))
    t0 = time.perf_counter()
    try:
        log(0, float("nan"))
        loop = range(1, steps + 1)
        if iterate is not None:
            loop = iterate(loop, f"Adam, L={model.L}, {model.parametrisation}")
        data = None
        stopped_at = stalled_at = None
        recent: list[float] = []
        for k in loop:
            if data is None or (k - 1) % resample_every == 0:
                data = sample_tokens_torch(None, n, batch, generator=generator, task=task,
                                           device=device, chol=chol)
            opt.zero_grad(set_to_none=True)
            if closed_form:
                with torch.no_grad():
                    if model.parametrisation == "full":
                        loss, *grads = _full_loss_grad(model.P, model.Q, data.Z, data.y_q)
                    elif model.parametrisation == "sparse":
                        loss, *grads = _sparse_loss_grad(model.A, data.Z, data.y_q)
                    else:
                        loss, *grads = _gdpp2_loss_grad(model.A, model.B, data.Z, data.y_q)
            else:
                loss = batch_loss(data.Z, data.y_q)
            value = float(loss.detach())
            if not math.isfinite(value) or (stop_above is not None and value > stop_above):
                stopped_at = k
                log(k, value)
                break
            if stall is not None and k <= stall[0]:
                recent.append(value)
                if k == stall[0] and np.mean(recent[-max(1, stall[0] // 10):]) > stall[1]:
                    stalled_at = k
                    log(k, value)
                    break
            if closed_form:
                for p, g in zip(params, grads):
                    p.grad = g
            else:
                loss.backward()
            if clip is not None:
                with torch.no_grad():
                    for p in params:
                        g = p.grad
                        norms = torch.linalg.matrix_norm(g)            # per layer, (L,)
                        g.mul_(torch.clamp(clip / (norms + 1e-300), max=1.0)[:, None, None])
            opt.step()
            if sched is not None:
                sched.step()
            if k % log_every == 0 or k == steps:
                log(k, value)
    finally:
        torch.set_num_threads(old_threads)
    seconds = time.perf_counter() - t0
    return TrainResult(
        step=np.asarray(log_step, dtype=np.int64), batch_loss=np.asarray(log_loss),
        lr=np.asarray(log_lr), A_log=np.asarray(A_log), B_log=np.asarray(B_log),
        seconds=seconds,
        settings=dict(optimizer=optimizer, lr=lr, betas=(b1, b2), weight_decay=weight_decay,
                      halve_every=halve_every, clip=clip, batch=batch, steps=steps,
                      resample_every=resample_every, task=task, device=str(device),
                      compile=compile, stop_above=stop_above, stall=stall),
        stopped_at=stopped_at, stalled_at=stalled_at)
