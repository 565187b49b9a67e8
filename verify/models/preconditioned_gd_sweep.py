"""Sweeps of the GD++ transformer of Ahn, Cheng, Daneshmand, Sra 2023 (eq. 11; App. D, Figs. 6-7):
several models of different depth ``L`` or context length ``n`` trained side by side in one
stacked computation.

A model of the sweep is the authors' transformer (``Transformer_F`` of their code: ``P_l =
[[B_l, 0], [0, 1]]``, ``Q_l = [[A_l, 0], [0, 0]]``, every entry of ``A_l, B_l`` trained; eq. 11,
**no** minus sign in ``Q``). The ``K`` models of a sweep are stacked into parameters ``A, B`` of
shape ``(K, L_max, d, d)``; a model with ``L < L_max`` layers has its layers ``l >= L`` fixed at
zero (``A_l = 0`` is the identity layer) and never updated. The loss is the sum of the models'
batch losses, so each model gets its own gradient, its own per-matrix clipping and, Adam being
elementwise, its own optimiser state: a model trains as it would alone on the same batches
(a test checks this bit for bit). Models with the same ``n`` share each step's batch.

The forward pass runs on the context Gram matrix and the query column: a linear layer acts on
every token column by ``T_l = I + P_l G_l Q_l`` (``G_l = (1/n) Z_{l,c} Z_{l,c}^T``), so ``G_{l+1} =
T_l G_l T_l^T`` and ``z_{q,l+1} = T_l z_{q,l}`` (the recursion of
:meth:`verify.models.linear_transformer.LinearTransformer.predict`), batched over models.

Contents
--------
gdpp_predict_stacked   predictions of K stacked GD++ models from Gram matrices
gdpp_loss_grad         their batch losses and the loss gradient by the chain rule (numpy)
train_gdpp_sweep       AdamW on K stacked GD++ models (depths and context lengths of a sweep)
SweepRun               the record of a sweep
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import numpy as np

from .. import validate

try:  # torch is needed only for training
    import torch
except ImportError:  # pragma: no cover
    torch = None

__all__ = ["SweepRun", "gdpp_loss_grad", "gdpp_predict_stacked", "train_gdpp_sweep", "gram_batch"]


def gram_batch(chol, n: int, batch: int, generator):
    """One batch of prompts of the inverse task (``x ~ N(0, Sigma)``, ``w* ~ N(0, Sigma^{-1})``)
    as ``(G, z_q, y_q)``: the context Gram matrix ``G = (1/n) Z_c Z_c^T`` (batch, d+1, d+1), the
    query column ``z_q`` (label 0) and the query target (drawn by
    :func:`verify.models.linear_transformer.sample_tokens_torch`)."""
    from .linear_transformer import sample_tokens_torch

    tok = sample_tokens_torch(None, n, batch, generator=generator, chol=chol)
    Zc = tok.Z[:, :, :n]
    return (Zc @ Zc.transpose(1, 2)) / n, tok.Z[:, :, n], tok.y_q


def _gram_batch_numpy(chol, n: int, batch: int, generator):
    """:func:`gram_batch` in numpy (float64) from the same Gaussians (drawn by the same calls):
    ``G = C' (g_c^T g_c / n) C'^T`` with ``C' = [C; u^T]`` (the tokens are ``C' g``), so the per-prompt
    product is one ``(d, n) x (n, d)`` matrix product. Equal to :func:`gram_batch` to round-off."""
    from .linear_attention import standard_normal

    d = chol.shape[0]
    g = standard_normal((batch, n + 1, d), generator, generator.device, torch.float32).numpy().astype(np.float64)
    u = standard_normal((batch, d), generator, generator.device, torch.float32).numpy().astype(np.float64)
    gc = g[:, :n]
    Q = (np.swapaxes(gc, 1, 2) @ gc) / n                                  # (batch, d, d)
    QCt = (Q.reshape(batch * d, d) @ chol.T).reshape(batch, d, d)         # Q C^T
    G = np.empty((batch, d + 1, d + 1))
    G[:, :d, :d] = (np.swapaxes(QCt, 1, 2).reshape(batch * d, d) @ chol.T).reshape(batch, d, d)   # C Q C^T
    Qu = np.einsum("bij,bj->bi", Q, u)
    G[:, :d, d] = G[:, d, :d] = Qu @ chol.T                              # C Q u
    G[:, d, d] = np.einsum("bi,bi->b", Qu, u)
    zq = np.zeros((batch, d + 1))
    zq[:, :d] = g[:, n] @ chol.T
    return G, zq, np.einsum("bi,bi->b", g[:, n], u)


def _left(M, X):
    """``M_k X_{k,b}`` for a per-model ``M`` (K, d, d) and per-prompt ``X`` (K, batch, d, e): one
    matrix product per model (the batch folded into the columns)."""
    K, Bt, d, e = X.shape
    return (M @ X.permute(0, 2, 1, 3).reshape(K, d, Bt * e)).reshape(K, d, Bt, e).permute(0, 2, 1, 3)


def _right(X, M):
    """``X_{k,b} M_k`` for per-prompt ``X`` (K, batch, d, e) and a per-model ``M`` (K, e, f)."""
    K, Bt, d, e = X.shape
    return (X.reshape(K, Bt * d, e) @ M).reshape(K, Bt, d, M.shape[-1])


def _matvec(M, v):
    """``M v`` per prompt: ``M`` (..., d, d), ``v`` (..., d)."""
    return (M * v[..., None, :]).sum(-1)


def gdpp_predict_stacked(A, B, G, zq):
    """``TF_L = -[Z_L]_{d+1,n+1}`` of ``K`` stacked GD++ models (eq. 11).

    In blocks, ``G = [[S, s], [s^T, .]]`` (``S = (1/n) X_c X_c^T``, ``s = (1/n) X_c y_c``) and
    ``z_q = (x, y)``; the layer ``T = [[M, 0], [c^T, 1]]`` with ``M = I + B_l S A_l`` and ``c =
    A_l^T s`` gives ``y <- y + s^T A_l x``, ``x <- M x``, ``s <- M (S c + s)``, ``S <- M S M^T``
    (the label-label entry of ``G`` never reaches the prediction). The per-model products are one
    matrix product per model; only ``M S M^T`` is a product per prompt, and it is formed only
    before the last two layers (the last layer reads ``s`` and ``x``).

    Parameters
    ----------
    A, B : Tensor (K, L, d, d)
        ``Q_l = [[A_l, 0], [0, 0]]``, ``P_l = [[B_l, 0], [0, 1]]`` per model (a layer with ``A_l =
        0`` is the identity).
    G : Tensor (K, batch, d+1, d+1)
        Context Gram matrices ``(1/n) Z_c Z_c^T`` per model (the 1/n of eq. 4 included).
    zq : Tensor (K, batch, d+1)
        Query columns (label entry 0 or any value: it is carried additively, Lemma 6).

    Returns
    -------
    Tensor (K, batch)
    """
    L, d = A.shape[1], A.shape[2]
    S, s, x, y = G[..., :d, :d], G[..., :d, d], zq[..., :d], zq[..., d]
    for l in range(L):
        Al, Bl = A[:, l], B[:, l]
        y = y + (s * torch.bmm(x, Al.transpose(1, 2))).sum(-1)            # s^T A_l x
        if l == L - 1:
            break
        BSA = _left(Bl, _right(S, Al))                                    # M - I
        v = _matvec(S, torch.bmm(s, Al)) + s                              # S c + s
        x = x + _matvec(BSA, x)
        s = v + _matvec(BSA, v)
        if l < L - 2:                                 # the last layer reads s and x only, not S
            SM = S + S @ BSA.transpose(-1, -2)                            # S M^T
            S = SM + BSA @ SM
    return -y


def _rows_times(S, M):
    """``S_b M`` for per-prompt ``S`` (K, batch, d, e) and per-model ``M`` (K, e, f), numpy: one matrix
    product per model."""
    K, Bt, d, e = S.shape
    return (S.reshape(K, Bt * d, e) @ M).reshape(K, Bt, d, M.shape[-1])


def _times_rows(M, S):
    """``M S_b`` for per-model ``M`` (K, d, d) and per-prompt ``S`` (K, batch, d, e), numpy."""
    return M[:, None] @ S


def _mv(M, v):
    """``M_b v_b`` per prompt, numpy: ``M`` (K, batch, d, e), ``v`` (K, batch, e)."""
    return np.einsum("kbij,kbj->kbi", M, v)


def _tmv(M, v):
    """``M_b^T v_b`` per prompt, numpy."""
    return np.einsum("kbji,kbj->kbi", M, v)


def gdpp_loss_grad(A, B, G, zq, y, weight=None):
    """Batch losses of ``K`` stacked GD++ models (as :func:`gdpp_predict_stacked`) and the gradient of
    ``sum_k weight_k loss_k`` in ``A, B``, by the chain rule written out (numpy, float64): the
    forward recursion of :func:`gdpp_predict_stacked` and its adjoint, layer by layer from the last
    (``y`` is carried additively, so its adjoint is the same at every layer; ``S_l`` is symmetric).
    The same gradient as autograd through :func:`gdpp_predict_stacked` to round-off, several times
    cheaper at ``d = 5``: the per-prompt products are numpy's small matrix products, the sums over
    the prompts one matrix product per model.

    Parameters
    ----------
    A, B : ndarray (K, L, d, d)
    G : ndarray (K, batch, d+1, d+1)
    zq : ndarray (K, batch, d+1)
    y : ndarray (K, batch)
        Targets.
    weight : ndarray (K,), optional
        Default ones.

    Returns
    -------
    losses : ndarray (K,)
        ``mean_b (TF_L - y)^2`` per model.
    gA, gB : ndarray (K, L, d, d)
    """
    K, L, d = A.shape[0], A.shape[1], A.shape[2]
    Bt = G.shape[1]
    S, s, x = np.ascontiguousarray(G[..., :d, :d]), np.ascontiguousarray(G[..., :d, d]), zq[..., :d]
    out = zq[..., d]
    tape = []
    for l in range(L):
        Al, Bl = A[:, l], B[:, l]
        Ax = x @ np.swapaxes(Al, -1, -2)                       # A_l x per prompt (rows)
        Ats = s @ Al                                           # A_l^T s
        out = out + (s * Ax).sum(-1)
        if l == L - 1:
            tape.append((S, s, x, Ax, Ats, None, None, None, None))
            break
        SA = _rows_times(S, Al)
        C = _times_rows(Bl, SA)                                # M - I = B_l S A_l
        v = _mv(S, Ats) + s
        x1, s1 = x + _mv(C, x), v + _mv(C, v)
        SM = None
        if l < L - 2:
            SM = S + S @ np.swapaxes(C, -1, -2)                # S M^T
            S1 = SM + C @ SM
        tape.append((S, s, x, Ax, Ats, SA, C, v, SM))
        x, s = x1, s1
        if SM is not None:
            S = S1
    r = -out - y
    losses = np.mean(r * r, axis=1)
    w = np.ones(K) if weight is None else np.asarray(weight, dtype=float)
    gy = (-2.0 / Bt) * r * w[:, None]                          # d(weighted loss) / d y_L, every layer
    gA, gB = np.zeros_like(A), np.zeros_like(B)
    gx = gs = gS = None
    for l in range(len(tape) - 1, -1, -1):
        S, s, x, Ax, Ats, SA, C, v, SM = tape[l]
        Al, Bl = A[:, l], B[:, l]
        gyc = gy[..., None]
        gA[:, l] += np.swapaxes(gyc * s, -1, -2) @ x            # y += s^T A_l x
        gs_l, gx_l = gyc * Ax, gyc * Ats
        gS_l = None
        if C is not None:
            gx_l = gx_l + gx + _tmv(C, gx)                     # x' = M x
            gv = gs + _tmv(C, gs)                              # s' = M v
            gC = gx[..., :, None] * x[..., None, :] + gs[..., :, None] * v[..., None, :]
            if SM is not None:                                 # S' = M S M^T
                Gs = gS + np.swapaxes(gS, -1, -2)
                gC = gC + Gs @ np.swapaxes(SM, -1, -2)
                if l > 0:
                    T = gS + gS @ C
                    gS_l = T + np.swapaxes(C, -1, -2) @ T
            gu = _mv(S, gv)                                    # v = S A_l^T s + s
            gA[:, l] += np.swapaxes(s, -1, -2) @ gu
            gs_l = gs_l + gv + gu @ np.swapaxes(Al, -1, -2)
            H = _times_rows(np.swapaxes(Bl, -1, -2), gC)       # C = B_l S A_l
            gB[:, l] += (np.swapaxes(gC, 1, 2).reshape(K, d, Bt * d)
                         @ np.swapaxes(SA, -1, -2).reshape(K, Bt * d, d))
            gA[:, l] += np.swapaxes(S.reshape(K, Bt * d, d), -1, -2) @ H.reshape(K, Bt * d, d)
            if l > 0:
                extra = gv[..., :, None] * Ats[..., None, :] + _rows_times(H, np.swapaxes(Al, -1, -2))
                gS_l = extra if gS_l is None else gS_l + extra
        gx, gs, gS = gx_l, gs_l, gS_l
    return losses, gA, gB


def _stacked_rows(draws, repeats, batch: int, select, cat):
    """``(G, zq, y)`` of the stacked computation from one draw ``(G, zq, y)`` of ``r b`` prompts per context
    length (``r`` of ``repeats``, ``b = batch``): each draw cut into ``r`` rows of ``b`` prompts, the rows of
    every ``n`` joined by ``cat`` (``torch.cat`` or ``numpy.concatenate``) and indexed by ``select`` (the
    row of each model's each row)."""
    return tuple(cat([x.reshape(r, batch, *x.shape[1:]) for x, r in zip(parts, repeats)])[select]
                 for parts in zip(*draws))


@dataclass
class SweepRun:
    """Record of :func:`train_gdpp_sweep`.

    Attributes
    ----------
    specs : list of (L, n)
        The models, in order.
    step : ndarray (T,)
        Logged steps (0 is the initialisation).
    batch_loss : ndarray (T, K)
        Each model's batch loss ``mean (TF_L - y_q)^2`` at the logged steps (NaN at 0).
    A_log, B_log : ndarray (T, K, L_max, d, d)
        ``A_l``, ``B_l`` in the eq.-11 convention (``Q_l = +[[A_l, 0], [0, 0]]``), float64.
    seconds : float
    settings : dict
    stopped_at : int or None
        The step at which some model's batch loss was non-finite or above ``stop_above`` (the
        run stopped there); None if it ran to the end.
    """

    specs: list
    step: np.ndarray
    batch_loss: np.ndarray
    A_log: np.ndarray = field(repr=False)
    B_log: np.ndarray = field(repr=False)
    seconds: float
    settings: dict = field(default_factory=dict)
    stopped_at: int | None = None

    def weights(self, k: int, frac: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
        """Model ``k``'s ``(A, B)`` (eq.-11 sign, its own ``L`` layers), averaged over the last
        ``frac`` of the logged iterates (damps the last steps' SGD noise)."""
        L = self.specs[k][0]
        m = max(1, int(round(len(self.step) * frac)))
        return self.A_log[-m:, k, :L].mean(axis=0), self.B_log[-m:, k, :L].mean(axis=0)


def _specs(specs) -> list[tuple[int, int]]:
    try:
        out = [(validate.integer("L", L), validate.integer("n", n)) for L, n in specs]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"specs: expected pairs (L, n) of positive integers ({exc})") from None
    if not out:
        raise ValueError("specs: expected at least one (L, n) pair")
    return out


def train_gdpp_sweep(specs, Sigma, *, steps: int, batch: int, lr: float, generator,
                     betas=(0.99, 0.9), halve_every: int | None = None, clip: float | None = None,
                     init_std: float = 1e-3, init=None, resample_every: int = 1, dtype=None, log_every: int = 10,
                     stop_above: float | None = None, threads: int | None = 1, compile: bool = False,
                     closed_gradient: bool = False,
                     iterate: Callable[[Iterable, str], Iterable] | None = None) -> SweepRun:
    """AdamW on ``K`` GD++ transformers (eq. 11) side by side, one per ``(L, n)`` of ``specs``.

    Every entry of every ``A_l, B_l`` starts i.i.d. ``N(0, init_std^2)`` (drawn in the order of
    ``specs``, layer by layer; the layers past a model's ``L`` are zero), or at ``init``. Every
    ``resample_every`` steps a fresh batch of prompts (``batch``, or ``batch[n]``) is drawn for every
    distinct ``n`` (in ascending order of ``n``; the models with that ``n`` share it), takes each model's loss
    ``mean (TF_L - y_q)^2`` (eq. 5, no 1/2), clips
    the gradient of each model's each ``A_l`` and ``B_l`` to Frobenius norm ``clip`` (the paper:
    0.01) and makes one AdamW step (``weight_decay = 0``); the learning rate is halved every
    ``halve_every`` steps.

    Parameters
    ----------
    specs : sequence of (L, n)
        Depth and context length of each model.
    Sigma : array_like
        Covariance of the covariates (d x d SPD or eigenvalues); ``w* ~ N(0, Sigma^{-1})``.
    steps : int
    batch : int or mapping n -> int
        Prompts per step of each context length (the models with that ``n`` share them). A mapping
        gives each ``n`` of ``specs`` its own batch, each a multiple of the smallest ``b``: a model
        whose ``n`` has ``r b`` prompts runs as ``r`` rows of ``b`` prompts of the stacked
        computation, its loss the mean over all ``r b`` (the same loss as one batch of ``r b``).
    lr : float
    generator : torch.Generator
        The only source of randomness (its device is the run's).
    betas : pair of floats
        Adam moments (the authors' notebooks: ``(0.99, 0.9)``; Fig. 6's: ``(0.99, 0.99)``).
    halve_every : int, optional
    clip : float, optional
    init_std : float
    init : pair of arrays (K, L_max, d, d), optional
        Starting ``(A, B)`` (eq.-11 sign) instead of the random draw (entries past a model's depth
        are ignored: those layers stay zero).
    resample_every : int
        Steps per batch (the paper: 100; 1 = a fresh batch every step).
    dtype : torch.dtype, optional
        Default float64.
    log_every : int
    stop_above : float, optional
        Stop when any model's batch loss is above this value (a non-finite loss always stops).
    threads : int or None
        CPU threads during the run; None leaves torch's setting.
    compile : bool
        Evaluate the models' batch losses through ``torch.compile`` (needs a C++ compiler on a CPU,
        Triton on a GPU; compiles once, then faster per step at large batches).
    closed_gradient : bool
        Take the losses and their gradient from :func:`gdpp_loss_grad` (the chain rule in numpy;
        float64 on the CPU only) instead of autograd: the same gradient to round-off, cheaper per
        step at ``d = 5``.
    iterate : callable, optional
        ``iterate(range, desc)`` progress wrapper.

    Returns
    -------
    SweepRun
    """
    if torch is None:  # pragma: no cover
        raise ValueError("generator: torch is not installed")
    specs = _specs(specs)
    steps = validate.integer("steps", steps, low=0)
    ns = sorted({n for _, n in specs})
    if isinstance(batch, Mapping):
        given = dict(batch)
        if set(given) != set(ns):
            raise ValueError(f"batch: expected an integer or a batch for each n of specs {ns}, got {given!r}")
        per_n = [validate.integer("batch", given[n]) for n in ns]
        batch = min(per_n)
        if any(b % batch for b in per_n):
            raise ValueError(f"batch: expected multiples of the smallest batch {batch}, got {given!r}")
        repeats = [b // batch for b in per_n]
    else:
        batch = validate.integer("batch", batch)
        repeats = [1] * len(ns)
    lr = validate.positive("lr", lr)
    generator = validate.generator(generator)
    try:
        b1, b2 = (float(b) for b in betas)
    except (TypeError, ValueError):
        raise ValueError(f"betas: expected two numbers in [0, 1), got {betas!r}") from None
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ValueError(f"betas: expected two numbers in [0, 1), got {betas!r}")
    if halve_every is not None:
        halve_every = validate.integer("halve_every", halve_every)
    if clip is not None:
        clip = validate.positive("clip", clip)
    init_std = validate.nonnegative("init_std", init_std)
    log_every = validate.integer("log_every", log_every)
    resample_every = validate.integer("resample_every", resample_every)
    if stop_above is not None:
        stop_above = validate.positive("stop_above", stop_above)
    lam = validate.covariance("Sigma", Sigma)
    dtype = torch.float64 if dtype is None else dtype
    device = generator.device
    d, K = lam.shape[0], len(specs)
    L_max = max(L for L, _ in specs)
    chol = torch.as_tensor(np.linalg.cholesky(lam), dtype=dtype, device=device)

    mask = torch.zeros(K, L_max, 1, 1, dtype=dtype, device=device)
    A0 = torch.zeros(K, L_max, d, d, dtype=dtype, device=device)
    B0 = torch.zeros_like(A0)
    for k, (L, _) in enumerate(specs):
        mask[k, :L] = 1.0
        if init is None:
            for l in range(L):
                for M in (A0, B0):
                    M[k, l] = torch.randn((d, d), generator=generator, device=device, dtype=dtype) * init_std
    if init is not None:
        for name, M, value in (("init", A0, init[0]), ("init", B0, init[1])):
            arr = validate.real_array(name, value, 4)
            if arr.shape != tuple(M.shape):
                raise ValueError(f"init: expected two arrays of shape {tuple(M.shape)}, got {arr.shape}")
            M.copy_(torch.as_tensor(arr, dtype=dtype, device=device) * mask)
    A = torch.nn.Parameter(A0)
    B = torch.nn.Parameter(B0)
    opt = torch.optim.AdamW([A, B], lr=lr, betas=(b1, b2), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=halve_every, gamma=0.5) if halve_every else None
    if not isinstance(compile, bool):
        raise ValueError(f"compile: expected True or False, got {compile!r}")
    if not isinstance(closed_gradient, bool):
        raise ValueError(f"closed_gradient: expected True or False, got {closed_gradient!r}")
    if closed_gradient and (dtype != torch.float64 or device.type != "cpu" or compile):
        raise ValueError("closed_gradient: needs float64 on the CPU and compile=False")

    def batch_losses(A, B, G, zq, y):
        return torch.mean((gdpp_predict_stacked(A, B, G, zq) - y) ** 2, dim=1)

    if compile:
        batch_losses = torch.compile(batch_losses)
    # rows of the stacked computation: r rows of `batch` prompts for a model whose n has r batches
    # (row j of n's draw), the model's loss the mean of its rows'
    first = np.cumsum([0] + repeats)
    rows = [(k, first[ns.index(n)] + j) for k, (_, n) in enumerate(specs) for j in range(repeats[ns.index(n)])]
    row_index = np.asarray([j for _, j in rows])
    of_row = np.asarray([k for k, _ in rows])
    w_row = np.asarray([1.0 / repeats[ns.index(specs[k][1])] for k, _ in rows])
    replicated = len(rows) > K
    if closed_gradient:
        sum_rows = (of_row[None, :] == np.arange(K)[:, None]).astype(float)   # (K, rows): a model's rows summed
        chol_np = np.linalg.cholesky(lam)
        draw, select, cat = (lambda n, b: _gram_batch_numpy(chol_np, n, b, generator)), row_index, np.concatenate
    else:
        model_of = torch.as_tensor(of_row, device=device)
        row_weight = torch.as_tensor(w_row, dtype=dtype, device=device)
        select = torch.as_tensor(row_index, device=device)
        draw, cat = (lambda n, b: gram_batch(chol, n, b, generator)), torch.cat

    log_step, log_loss, A_log, B_log = [], [], [], []

    def log(k, losses):
        log_step.append(k)
        log_loss.append(losses)
        A_log.append(A.detach().cpu().numpy().astype(np.float64))
        B_log.append(B.detach().cpu().numpy().astype(np.float64))

    old_threads = torch.get_num_threads()
    if threads is not None and device.type == "cpu":
        torch.set_num_threads(validate.integer("threads", threads))
    stopped_at = None
    t0 = time.perf_counter()
    try:
        log(0, np.full(K, np.nan))
        loop = range(1, steps + 1)
        if iterate is not None:
            loop = iterate(loop, f"Adam, GD++ sweep of {K} models")
        for k in loop:
            if (k - 1) % resample_every == 0:
                G, zq, y = _stacked_rows([draw(n, batch * r) for n, r in zip(ns, repeats)], repeats, batch, select, cat)
            opt.zero_grad(set_to_none=True)
            if closed_gradient:
                An, Bn = A.detach().numpy(), B.detach().numpy()
                if replicated:
                    An, Bn = An[of_row], Bn[of_row]
                per_row, gA, gB = gdpp_loss_grad(An, Bn, G, zq, y, w_row)
                values = per_row
                if replicated:
                    values = sum_rows @ (per_row * w_row)
                    gA = (sum_rows @ gA.reshape(len(rows), -1)).reshape(A.shape)
                    gB = (sum_rows @ gB.reshape(len(rows), -1)).reshape(B.shape)
            else:
                if replicated:
                    per_row = batch_losses(A[model_of], B[model_of], G, zq, y)
                    per_model = torch.zeros(K, dtype=dtype, device=device).index_add(0, model_of, per_row * row_weight)
                else:
                    per_model = batch_losses(A, B, G, zq, y)
                values = per_model.detach().cpu().numpy().astype(np.float64)
            if not np.all(np.isfinite(values)) or (stop_above is not None and values.max() > stop_above):
                stopped_at = k
                log(k, values)
                break
            if closed_gradient:
                A.grad, B.grad = torch.from_numpy(gA), torch.from_numpy(gB)
            else:
                per_model.sum().backward()
            with torch.no_grad():
                for p in (A, B):
                    p.grad.mul_(mask)
                    if clip is not None:
                        norms = torch.linalg.matrix_norm(p.grad)[..., None, None]   # (K, L, 1, 1)
                        p.grad.mul_(torch.clamp(clip / (norms + 1e-300), max=1.0))
            opt.step()
            if sched is not None:
                sched.step()
            if k % log_every == 0 or k == steps:
                log(k, values)
    finally:
        torch.set_num_threads(old_threads)
    return SweepRun(specs=specs, step=np.asarray(log_step, dtype=np.int64), batch_loss=np.asarray(log_loss),
                    A_log=np.asarray(A_log), B_log=np.asarray(B_log), seconds=time.perf_counter() - t0,
                    settings=dict(lr=lr, betas=(b1, b2), halve_every=halve_every, clip=clip,
                                  batch=batch if not replicated else {n: batch * r for n, r in zip(ns, repeats)},
                                  steps=steps, init_std=init_std, resample_every=resample_every,
                                  dtype=str(dtype).replace("torch.", ""), compile=compile,
                                  device=str(device), stop_above=stop_above, closed_gradient=closed_gradient),
                    stopped_at=stopped_at)
