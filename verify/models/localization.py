"""Models of Bao, Hataya, Karakida 2024: the clipped-linear attention of Sec. 3 (eq. 3), the
softmax self-attention block of Sec. 2 with the LOCATER regulariser (Sec. 6), and the statistics
of W_QK and of attention that Sec. 7 measures. The trained language model of Sec. 7 (embedding,
Post-LN, cross-entropy on text) is :mod:`verify.models.localization_lm`.

H. Bao, R. Hataya, R. Karakida, *Self-attention networks localize when QK-eigenspectrum
concentrates*, ICML 2024.

Tokens are **columns**: ``X`` has shape ``(B, d, T)`` (a batch of ``d x T`` matrices). The
query is the last token ``x_T``; ``omega = X^T W_QK x_T / lambda``.

Clipped-linear model (Sec. 3, App. B.1): the softmax is replaced coordinate-wise by
``S~(omega)_i = clip(<gamma^i, omega> + 1/T, 0, 1)`` with ``gamma^i = e^i / T - 1 / T^2``;
``Gamma`` has the columns ``gamma~^i`` (``gamma^i`` where ``u_i in [0, 1]``, else 0) and
``gamma~_0`` the offsets (``1/T`` inside, 0 below, 1 above). The output is
``F(X)_T = W_F (W_V X S~(omega) + x_T)`` and the per-sample loss ``J = |y - F(X)_T|^2 / 2``.
Its QK-gradient (eq. 3, for ``Gamma`` locally constant, i.e. off the clip boundaries) is::

    l^-2 X Gamma P Gamma^T X^T W_QK x_T x_T^T + l^-1 X Gamma P gamma~_0 x_T^T + l^-1 X Gamma q x_T^T

with ``P = X^T W_V^T W_F^T W_F W_V X`` and ``q = X^T W_V^T W_F^T (W_F x_T - y)``; the paper
prints the first two terms **without P** (``form="printed"``).

Block of Sec. 2: ``L`` blocks ``Z = X + W_V X A^T``, ``X' = Z + W_F2 relu(W_F1 Z)``, with the
causal softmax attention ``A[t, s] = softmax_s(x_s^T W_Q^T W_K x_t / lambda)`` over keys
``s <= t``, ``lambda = sqrt(d)``, separate ``W_Q, W_K, W_V`` (single head), no layer norm (the
block as analysed in the paper; the paper's experiments use post-LN), no embedding; the
prediction of the next token is the last output column.

Contents
--------
linearised_coefficients   ``u``, ``Gamma``, ``gamma~_0`` of the clipped-linear softmax
clipped_linear_loss       per-sample loss of the clipped-linear model (numpy or torch)
qk_gradient               eq. 3 per sample, ``form="corrected"`` (P restored) or ``"printed"``
qk_gradient_expansion     the index sums (19)-(21) of App. B.1, per sample
qk_gradient_terms         the terms (19)-(21) per sample in O(d T) memory (long sequences), and
                          (19) restricted to its alpha = i, beta = j summands (Sec. 3)
eigenspectrum             ``tr W_QK / d``, eq.-8 variance of the symmetric part, ``||W_QK||_F^2``
locater_penalty           kappa1 ||W_QK||_F^2 + kappa2 (tr W_QK - 1)^2 (torch)
SelfAttentionLM           the torch blocks of Sec. 2 (no embedding, no layer norm)
attention_entropy         Shannon entropy of each causal attention row
signal_propagation_frequency  Fig. 7's batch frequency of ``u_i in [0, 1]`` from last-query logits
"""

from __future__ import annotations

import math

import numpy as np

from .. import validate

try:  # torch is needed only for the trainable model and autograd
    import torch
    from torch import nn
except ImportError:  # pragma: no cover
    torch = nn = None

__all__ = ["FORMS", "SelfAttentionLM", "attention_entropy",
           "clipped_linear_loss", "eigenspectrum", "linearised_coefficients", "locater_penalty", "qk_gradient",
           "qk_gradient_expansion", "qk_gradient_terms", "signal_propagation_frequency"]

FORMS = ("corrected", "printed")


def _square(name: str, value, d: int) -> np.ndarray:
    arr = validate.real_array(name, value, 2)
    if arr.shape != (d, d):
        raise ValueError(f"{name}: expected shape ({d}, {d}), got {arr.shape}")
    return arr


def _temperature(value) -> float:
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"temperature: expected a positive number, got {value!r}") from None
    if not (math.isfinite(t) and t > 0):
        raise ValueError(f"temperature: must be a finite number > 0, got {value!r}")
    return t


def _inputs(X, y, W_QK, W_V, W_F, temperature):
    X = validate.real_array("X", X, 3)
    B, d, T = X.shape
    if T < 2:
        raise ValueError(f"X: needs at least 2 tokens, got T = {T}")
    y = validate.real_array("y", y, 2)
    if y.shape != (B, d):
        raise ValueError(f"y: expected shape ({B}, {d}), got {y.shape}")
    return (X, y, _square("W_QK", W_QK, d), _square("W_V", W_V, d), _square("W_F", W_F, d),
            _temperature(temperature))


# =====================================================================================
# Clipped-linear model (Sec. 3, eq. 3, App. B.1)
# =====================================================================================
def linearised_coefficients(omega):
    """``u_i = <gamma^i, omega> + 1/T``, ``Gamma`` (columns gamma~^i) and ``gamma~_0`` per sample.

    Parameters
    ----------
    omega : array (B, T)
        Logits of the last query.

    Returns
    -------
    u : (B, T), Gamma : (B, T, T) with ``Gamma[b, alpha, i] = gamma~^i_alpha``, gamma0 : (B, T).
    """
    omega = validate.real_array("omega", omega, 2)
    B, T = omega.shape
    u = omega / T - omega.sum(axis=1, keepdims=True) / T**2 + 1.0 / T
    inside = (u >= 0) & (u <= 1)
    gamma = np.eye(T) / T - 1.0 / T**2                      # column i is gamma^i
    Gamma = gamma[None] * inside[:, None, :]
    gamma0 = np.where(inside, 1.0 / T, np.where(u > 1, 1.0, 0.0))
    return u, Gamma, gamma0


def _omega(X, W_QK, temperature):
    return np.einsum("bdt,de,be->bt", X, W_QK, X[:, :, -1]) / temperature


def clipped_linear_loss(X, y, W_QK, W_V, W_F, temperature):
    """Per-sample loss ``|y - W_F (W_V X S~(omega) + x_T)|^2 / 2`` of the clipped-linear model.

    numpy arrays give a numpy ``(B,)`` array; torch tensors (float64) give a torch ``(B,)``
    tensor through which autograd flows (``clamp`` has the derivative of ``Gamma`` off the
    clip boundaries).
    """
    if torch is not None and isinstance(W_QK, torch.Tensor):
        T = X.shape[-1]
        omega = torch.einsum("bdt,de,be->bt", X, W_QK, X[:, :, -1]) / temperature
        u = omega / T - omega.sum(dim=1, keepdim=True) / T**2 + 1.0 / T
        s = u.clamp(0.0, 1.0)
        out = torch.einsum("de,bet,bt->bd", W_V, X, s) + X[:, :, -1]
        r = out @ W_F.T - y
        return 0.5 * (r**2).sum(dim=1)
    X, y, W_QK, W_V, W_F, temperature = _inputs(X, y, W_QK, W_V, W_F, temperature)
    u, _, _ = linearised_coefficients(_omega(X, W_QK, temperature))
    s = np.clip(u, 0.0, 1.0)
    out = np.einsum("de,bet,bt->bd", W_V, X, s) + X[:, :, -1]
    r = out @ W_F.T - y
    return 0.5 * (r**2).sum(axis=1)


def qk_gradient(X, y, W_QK, W_V, W_F, temperature, form: str = "corrected", terms: bool = False):
    """Per-sample QK-gradient of eq. 3 (the expectation's integrand), shape ``(B, d, d)``.

    ``form="corrected"``: with ``P`` in the first two terms (eq. 3 corrected);
    ``form="printed"``: as printed, without ``P``. ``Gamma`` is evaluated at the sample
    (locally constant off the clip boundaries). ``terms=True`` returns the three terms
    separately (the matrix forms of (19), (20), (21)).
    """
    if form not in FORMS:
        raise ValueError(f"form: expected one of {FORMS}, got {form!r}")
    X, y, W_QK, W_V, W_F, lam = _inputs(X, y, W_QK, W_V, W_F, temperature)
    xT = X[:, :, -1]
    omega = _omega(X, W_QK, lam)
    _, Gamma, gamma0 = linearised_coefficients(omega)
    V = np.einsum("de,bet->bdt", W_F @ W_V, X)               # W_F W_V X
    P = np.einsum("bdt,bds->bts", V, V)                      # X^T W_V^T W_F^T W_F W_V X
    q = np.einsum("bdt,bd->bt", V, xT @ W_F.T - y)           # X^T W_V^T W_F^T (W_F x_T - y)
    if form == "printed":
        P = np.broadcast_to(np.eye(X.shape[2]), P.shape)
    XG = X @ Gamma                                           # X Gamma
    # l^-2 Gamma^T X^T W_QK x_T = l^-1 Gamma^T omega
    vecs = (np.einsum("bts,bs->bt", P, np.einsum("bai,ba->bi", Gamma, omega)),
            np.einsum("bts,bs->bt", P, gamma0), q)
    out = [np.einsum("bdt,bt,be->bde", XG, v / lam, xT) for v in vecs]
    return tuple(out) if terms else out[0] + out[1] + out[2]


def qk_gradient_expansion(X, y, W_QK, W_V, W_F, temperature):
    """The index sums (19), (20), (21) of App. B.1 per sample, each ``(B, d, d)``::

        (19) l^-2 sum_{i,j,alpha,beta} g^i_alpha g^j_beta (x_i^T P' x_j)(x_beta^T W_QK x_T) x_alpha x_T^T
        (20) l^-1 sum_{i,alpha,beta} g^i_alpha g^beta_0 (x_i^T P' x_beta) x_alpha x_T^T
        (21) l^-1 sum_{i,alpha} g^i_alpha {x_i^T W_V^T W_F^T (W_F x_T - y)} x_alpha x_T^T

    with ``P' = W_V^T W_F^T W_F W_V``; the sums are spelled out index by index (einsum).
    """
    X, y, W_QK, W_V, W_F, lam = _inputs(X, y, W_QK, W_V, W_F, temperature)
    xT = X[:, :, -1]
    _, G, g0 = linearised_coefficients(_omega(X, W_QK, lam))
    Pc = W_V.T @ W_F.T @ W_F @ W_V
    xPx = np.einsum("bdi,de,bej->bij", X, Pc, X)                       # x_i^T P' x_j
    xWx = np.einsum("bdk,de,be->bk", X, W_QK, xT)                      # x_beta^T W_QK x_T
    t19 = np.einsum("bai,bkj,bij,bk,bda,be->bde", G, G, xPx, xWx, X, xT) / lam**2
    t20 = np.einsum("bai,bk,bik,bda,be->bde", G, g0, xPx, X, xT) / lam
    r = np.einsum("bdi,df,bf->bi", X, (W_F @ W_V).T, xT @ W_F.T - y)  # x_i^T W_V^T W_F^T (W_F x_T - y)
    t21 = np.einsum("bai,bi,bda,be->bde", G, r, X, xT) / lam
    return t19, t20, t21


def qk_gradient_terms(X, y, W_QK, W_V, W_F, temperature):
    """The three terms (19), (20), (21) of the corrected eq. 3 per sample, and (19) restricted to
    the summands with ``alpha = i`` and ``beta = j`` (Sec. 3's "dominant" summands ``gamma~^i_i``),
    each ``(B, d, d)``, without forming the ``T x T`` matrices ``Gamma`` and ``P``.

    ``X Gamma = (X - xbar 1^T) diag(1{u in [0, 1]}) / T`` (``xbar`` the mean token) and
    ``Gamma^T omega = 1{u in [0, 1]} (u - 1/T)``; ``P v = X^T W_V^T W_F^T W_F W_V X v`` is applied
    as two products with ``X``. The restriction keeps ``gamma~^i_i = 1/T - 1/T^2`` on the
    diagonal of ``Gamma`` and drops its off-diagonal ``-1/T^2``. Agrees with
    :func:`qk_gradient` (``terms=True``) to round-off.

    Returns
    -------
    t19, t20, t21, t19_diagonal : arrays (B, d, d)
    """
    X, y, W_QK, W_V, W_F, lam = _inputs(X, y, W_QK, W_V, W_F, temperature)
    T = X.shape[2]
    xT = X[:, :, -1]
    # batched matrix-vector products (matmul) in place of the equivalent einsums: the same values up to
    # round-off, several times faster
    omega = ((xT @ W_QK.T)[:, None, :] @ X)[:, 0] / lam              # x_t^T W_QK x_T / lambda
    u = omega / T - omega.sum(axis=1, keepdims=True) / T**2 + 1.0 / T
    inside = ((u >= 0) & (u <= 1)).astype(float)
    gamma0 = np.where(inside > 0, 1.0 / T, np.where(u > 1, 1.0, 0.0))
    V = (W_F @ W_V) @ X                                              # W_F W_V X

    def row(v, M):                                                   # v^T M per sample, (B, T)
        return (v[:, None, :] @ M)[:, 0]

    def P(v):                                                        # X^T W_V^T W_F^T W_F W_V X v
        return row((V @ v[:, :, None])[:, :, 0], V)

    XG = (X - X.mean(axis=2, keepdims=True)) * (inside / T)[:, None, :]
    diag = inside * (1.0 / T - 1.0 / T**2)                           # gamma~^i_i
    q = row(xT @ W_F.T - y, V)
    pairs = ((XG, P(inside * (u - 1.0 / T))), (XG, P(gamma0)), (XG, q), (X * diag[:, None, :], P(diag * omega)))
    return tuple((A @ v[:, :, None]) * xT[:, None, :] / lam for A, v in pairs)


# =====================================================================================
# Eigenspectrum statistics and LOCATER
# =====================================================================================
def eigenspectrum(W_QK) -> dict:
    """``mean = tr W_QK / d``, ``variance = d tr(S^2) - tr(S)^2`` (eq. 8 with Sigma = I for the
    symmetric part ``S`` of ``W_QK``), ``trace``, ``frobenius_sq = ||W_QK||_F^2`` (LOCATER's scale)."""
    W = validate.real_array("W_QK", W_QK, 2)
    if W.shape[0] != W.shape[1]:
        raise ValueError(f"W_QK: expected a square matrix, got shape {W.shape}")
    d = W.shape[0]
    S = 0.5 * (W + W.T)
    tr = float(np.trace(S))
    return {"trace": tr, "mean": tr / d, "variance": float(d * np.sum(S * S) - tr**2),
            "frobenius_sq": float(np.sum(W * W))}


def locater_penalty(W_Q, W_K, kappa1: float, kappa2: float):
    """``kappa1 tr(W_QK^T W_QK) + kappa2 (tr W_QK - 1)^2`` with ``W_QK = W_Q^T W_K`` (torch, Sec. 6)."""
    for name, k in (("kappa1", kappa1), ("kappa2", kappa2)):
        if not (math.isfinite(float(k)) and float(k) >= 0):
            raise ValueError(f"{name}: must be a finite number >= 0, got {k!r}")
    W = W_Q.T @ W_K
    return kappa1 * (W * W).sum() + kappa2 * (torch.diagonal(W).sum() - 1.0) ** 2


def attention_entropy(A):
    """Shannon entropy (nats) of each causal attention row of ``A`` (B, T, T), row ``t`` over the keys
    ``s <= t`` (``0 log 0 = 0``): shape (B, T). Its mean over the rows is the attention entropy of
    Zhai et al. that Sec. 7 monitors."""
    return -torch.special.xlogy(A, A).sum(dim=-1)


def signal_propagation_frequency(omega):
    """Fig. 7's estimate of rho_i: the fraction of the batch with ``u_i = omega_i / T -
    sum_j omega_j / T^2 + 1 / T`` in ``[0, 1]`` (Definition 1), from the last query's logits
    ``omega`` (B, T) (``X^T W_QK x_T / lambda`` for the block of Sec. 2; a trained model's real
    logits, biases included); shape (T,). ``u_i in [0, 1]`` iff ``omega_i - mean(omega)`` lies in
    ``[-1, T - 1]``."""
    T = omega.shape[-1]
    u = omega / T - omega.sum(dim=-1, keepdim=True) / T**2 + 1.0 / T
    return ((u >= 0) & (u <= 1)).to(omega.dtype).mean(dim=0)


class SelfAttentionLM(nn.Module if nn is not None else object):
    """``L`` single-head softmax self-attention blocks with residuals and a ReLU FFN, no LN.

    Parameters
    ----------
    d : int
        Token dimension (no embedding: the model acts on the tokens).
    layers : int
        Number of blocks ``L >= 1``.
    generator : torch.Generator, optional
        Source of the initial weights (entries ``N(0, 1/d)``).
    dtype, device
        Of the parameters.
    """

    def __init__(self, d: int, layers: int = 1, *, generator=None, dtype=None, device=None):
        super().__init__()
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
            raise ValueError(f"d: expected an integer >= 1, got {d!r}")
        if isinstance(layers, bool) or not isinstance(layers, (int, np.integer)) or layers < 1:
            raise ValueError(f"layers: expected an integer >= 1, got {layers!r}")
        self.d, self.layers = int(d), int(layers)
        self.temperature = math.sqrt(d)
        dtype = dtype or torch.float64

        def init(scale=1.0):
            w = torch.randn(d, d, generator=generator, dtype=dtype, device=device) * (scale / math.sqrt(d))
            return nn.Parameter(w)

        self.W_Q = nn.ParameterList([init() for _ in range(layers)])
        self.W_K = nn.ParameterList([init() for _ in range(layers)])
        self.W_V = nn.ParameterList([init() for _ in range(layers)])
        self.W_F1 = nn.ParameterList([init() for _ in range(layers)])
        self.W_F2 = nn.ParameterList([init() for _ in range(layers)])

    def qk(self, layer: int = 0):
        """``W_QK = W_Q^T W_K`` of block ``layer``."""
        return self.W_Q[layer].T @ self.W_K[layer]

    def forward(self, X, return_all: bool = False):
        """``X`` (B, d, T) -> the last output column (B, d); with ``return_all`` also the list of
        attention matrices (B, T, T) and of block inputs (B, d, T)."""
        if X.ndim != 3 or X.shape[1] != self.d:
            raise ValueError(f"X: expected shape (B, {self.d}, T), got {tuple(X.shape)}")
        T = X.shape[-1]
        mask = torch.ones(T, T, dtype=torch.bool, device=X.device).tril()
        attns, inputs = [], []
        for l in range(self.layers):
            inputs.append(X)
            logits = (X.transpose(1, 2) @ (self.qk(l) @ X)).transpose(1, 2) / self.temperature  # [t, s]
            A = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)   # rows: queries t
            Z = X + (self.W_V[l] @ X) @ A.transpose(1, 2)
            X = Z + self.W_F2[l] @ torch.relu(self.W_F1[l] @ Z)
            attns.append(A)
        out = X[:, :, -1]
        return (out, attns, inputs) if return_all else out

    def locater(self, kappa1: float, kappa2: float):
        """LOCATER penalty summed over the blocks."""
        return sum(locater_penalty(self.W_Q[l], self.W_K[l], kappa1, kappa2) for l in range(self.layers))
