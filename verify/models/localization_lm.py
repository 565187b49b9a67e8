"""The language model of Bao, Hataya, Karakida 2024 (Sec. 7, App. D): a Post-LN transformer with
single-head causal softmax attention, trained by next-token cross-entropy with and without the
LOCATER regulariser (Sec. 6).

The paper's runs use fairseq 0.12.2's ``transformer_lm`` with one (or 3, 6) decoder layers, a
single head and input, attention and feed-forward widths all equal to ``d`` (128, or 32 in App. D).
This module builds the same block in plain torch:

* token embedding ``E`` (entries ``N(0, 1/d)``) scaled by ``sqrt(d)``, plus sinusoidal position
  embeddings (fairseq's default);
* each layer: ``X = LN(X + Attn(X))``, ``X = LN(X + W_2 relu(W_1 X + b_1) + b_2)`` (Post-LN, the
  fairseq default), ``Attn`` single-head with projections ``q = W_Q x + b_Q``, ``k = W_K x + b_K``,
  ``v = W_V x + b_V``, causal softmax of ``q_t . k_s / lambda`` with ``lambda = sqrt(d)`` and an
  output projection (fairseq's initialisation: Xavier-uniform, gain ``1/sqrt(2)`` for ``W_Q``,
  ``W_K``, ``W_V``);
* an output projection to the vocabulary (no bias, not tied, entries ``N(0, 1/d)``).

No dropout (fairseq's default 0.1 is left out: the runs here are short and dropout would add
noise to every measured statistic). Tokens are rows here (``(B, T, d)``), as in torch.

``W_QK = W_Q^T W_K`` (``d x d``, the weights, without ``1/lambda``) is the matrix LOCATER
penalises, ``kappa1 tr(W_QK^T W_QK) + kappa2 (tr W_QK - 1)^2`` summed over the layers (the paper does
not say how several layers are treated); its statistics are read from the first layer, as the
paper does for its deeper models (App. D). The attention logit of query ``t`` and key ``s`` is
``x_t^T W_QK x_s / lambda`` plus the bias terms.

The statistics of Sec. 7 come from :mod:`verify.models.localization`: the attention entropy
(:func:`~verify.models.localization.attention_entropy`), the eigenspectrum of ``W_QK``
(:func:`~verify.models.localization.eigenspectrum`) and Fig. 7's ``rho_i``
(:func:`~verify.models.localization.signal_propagation_frequency`), here from the first block's
real logits ``omega`` of the last query (biases included).

Contents
--------
PostLNTransformerLM       the model
train_locater_lm          Adam(W) training on a :class:`verify.tasks.text_corpus.Corpus`, with records
evaluate                  cross-entropy (nats) and perplexity on windows of a split
flat_parameters           the parameters as views of one buffer (one optimiser pass per step)
flat_gradient             their gradients into that buffer (clipped as ``clip_grad_norm_``)
FlatAdamW                 torch's functional AdamW on that buffer, without the Optimizer's per-step bookkeeping
"""

from __future__ import annotations

import math

import numpy as np

from .. import validate
from ..tasks.text_corpus import eval_windows, sample_windows
from .localization import attention_entropy, eigenspectrum, locater_penalty, signal_propagation_frequency

try:
    import torch
    from torch import nn
    from torch.optim.adamw import adamw as functional_adamw     # torch's AdamW without the Optimizer class
except ImportError:  # pragma: no cover
    torch = nn = functional_adamw = None

__all__ = ["PostLNTransformerLM", "train_locater_lm", "evaluate", "flat_parameters", "flat_gradient", "FlatAdamW"]


def _sinusoidal(T: int, d: int, dtype) -> "torch.Tensor":
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    half = d // 2
    freq = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) / max(half - 1, 1))
    ang = pos * freq[None]
    pe = torch.zeros(T, d, dtype=torch.float64)
    pe[:, :half], pe[:, half:2 * half] = torch.sin(ang), torch.cos(ang)
    return pe.to(dtype)


class PostLNTransformerLM(nn.Module if nn is not None else object):
    """Causal transformer language model: embedding, ``layers`` Post-LN blocks with one softmax
    attention head, output projection (see the module docstring).

    Parameters
    ----------
    vocab_size : int
        Number of token ids (>= 2).
    d : int
        Embedding = attention = feed-forward width (the paper's d; even, >= 2).
    layers : int
        Number of blocks (>= 1).
    T_max : int
        Longest sequence (rows of the position table).
    generator : torch.Generator, optional
        Source of the initial weights.
    """

    def __init__(self, vocab_size: int, d: int, layers: int = 1, T_max: int = 64, *, generator=None,
                 dtype=None):
        super().__init__()
        vocab_size = validate.integer("vocab_size", vocab_size, low=2)
        d = validate.integer("d", d, low=2)
        if d % 2:
            raise ValueError(f"d: expected an even width (sinusoidal positions), got {d}")
        layers = validate.integer("layers", layers)
        T_max = validate.integer("T_max", T_max)
        dtype = dtype or torch.float32
        self.vocab_size, self.d, self.layers, self.T_max = vocab_size, d, layers, T_max
        self.temperature = math.sqrt(d)

        def normal(*shape, std):
            return nn.Parameter(torch.randn(*shape, generator=generator, dtype=dtype) * std)

        def xavier(n_out, n_in, gain=1.0):
            bound = gain * math.sqrt(6.0 / (n_in + n_out))
            return nn.Parameter((torch.rand(n_out, n_in, generator=generator, dtype=dtype) * 2 - 1) * bound)

        def zeros(*shape):
            return nn.Parameter(torch.zeros(*shape, dtype=dtype))

        self.embed = normal(vocab_size, d, std=d ** -0.5)
        self.register_buffer("positions", _sinusoidal(T_max, d, dtype))
        # the causal mask as an additive bias (0 on s <= t, -inf above): s + 0 = s and s - inf = -inf give the
        # scores that masked_fill gives, and the backward pass of an addition is free (masked_fill's is not)
        causal = torch.ones(T_max, T_max, dtype=torch.bool).tril()
        self.register_buffer("causal_bias", torch.zeros(T_max, T_max, dtype=dtype).masked_fill(~causal, float("-inf")),
                             persistent=False)
        g = 2 ** -0.5
        self.W_Q = nn.ParameterList([xavier(d, d, g) for _ in range(layers)])
        self.W_K = nn.ParameterList([xavier(d, d, g) for _ in range(layers)])
        self.W_V = nn.ParameterList([xavier(d, d, g) for _ in range(layers)])
        self.W_O = nn.ParameterList([xavier(d, d) for _ in range(layers)])
        self.b_Q, self.b_K, self.b_V, self.b_O = (nn.ParameterList([zeros(d) for _ in range(layers)])
                                                  for _ in range(4))
        self.W_1 = nn.ParameterList([xavier(d, d) for _ in range(layers)])
        self.W_2 = nn.ParameterList([xavier(d, d) for _ in range(layers)])
        self.b_1, self.b_2 = (nn.ParameterList([zeros(d) for _ in range(layers)]) for _ in range(2))
        self.ln_attn = nn.ModuleList([nn.LayerNorm(d, dtype=dtype) for _ in range(layers)])
        self.ln_ffn = nn.ModuleList([nn.LayerNorm(d, dtype=dtype) for _ in range(layers)])
        self.out = normal(vocab_size, d, std=d ** -0.5)

    def qk(self, layer: int = 0):
        """``W_QK = W_Q^T W_K`` of block ``layer`` (the weights, without the biases and ``1/lambda``)."""
        return self.W_Q[layer].T @ self.W_K[layer]

    def locater(self, kappa1: float, kappa2: float):
        """LOCATER penalty ``kappa1 ||W_QK||_F^2 + kappa2 (tr W_QK - 1)^2`` summed over the blocks."""
        return sum(locater_penalty(self.W_Q[l], self.W_K[l], kappa1, kappa2) for l in range(self.layers))

    def _input(self, ids):
        if ids.ndim != 2 or ids.shape[1] > self.T_max:
            raise ValueError(f"ids: expected shape (B, T <= {self.T_max}), got {tuple(ids.shape)}")
        T = ids.shape[1]
        x = self.embed[ids] * math.sqrt(self.d) + self.positions[:T]
        return x, self.causal_bias[:T, :T]

    def _attention(self, l: int, x, causal_bias):
        """Block ``l``'s causal attention probabilities (B, T, T) and scores (B, T, T) on its input ``x``
        (``causal_bias``: 0 where key s <= query t, -inf above)."""
        q = x @ self.W_Q[l].T + self.b_Q[l]
        k = x @ self.W_K[l].T + self.b_K[l]
        scores = (q @ k.transpose(1, 2)) / self.temperature                        # [b, t, s]
        return torch.softmax(scores + causal_bias, dim=-1), scores

    def first_attention(self, ids):
        """The first block's attention probabilities (B, T, T) and last-query scores (B, T), as
        ``forward(ids, return_attention=True)`` gives them, without the rest of the model."""
        x, bias = self._input(ids)
        A, scores = self._attention(0, x, bias)
        return A, scores[:, -1, :]

    def forward(self, ids, return_attention: bool = False):
        """``ids`` (B, T) of token ids -> logits (B, T, vocab); with ``return_attention`` also the
        first block's attention probabilities (B, T, T) and its last-query scores (B, T)."""
        x, bias = self._input(ids)
        first = None
        for l in range(self.layers):
            A, scores = self._attention(l, x, bias)
            v = x @ self.W_V[l].T + self.b_V[l]
            x = self.ln_attn[l](x + (A @ v) @ self.W_O[l].T + self.b_O[l])
            h = torch.relu(x @ self.W_1[l].T + self.b_1[l]) @ self.W_2[l].T + self.b_2[l]
            x = self.ln_ffn[l](x + h)
            if l == 0:
                first = (A, scores[:, -1, :])
        logits = x @ self.out.T
        return (logits, *first) if return_attention else logits


def evaluate(model, ids, T: int, max_windows: int | None = None, chunk: int = 64, ce: bool = True) -> dict:
    """The model on the non-overlapping windows of ``ids`` (the first ``max_windows``): mean
    next-token cross-entropy ``ce`` (nats) and ``perplexity = exp(ce)``; the first block's attention
    entropy (``entropy_last``: the last query's row; ``entropy_all``: the mean over all queries of
    their causal rows) and Fig. 7's ``rho`` (T,); and per window (lists, for paired comparisons of
    two models on the same windows) ``ce_windows`` and ``entropy_windows`` (all queries).

    ``ce=False``: the attention statistics alone (no ``ce``, ``perplexity``, ``ce_windows``), from
    the first block only (:meth:`PostLNTransformerLM.first_attention`: the same numbers, without
    the cost of the rest of the model and of the vocabulary's logits)."""
    x, y = eval_windows(ids, T, max_windows)
    device = model.embed.device
    ce_w, ent_last, ent_all, rho = [], [], [], 0.0
    with torch.no_grad():
        for s in range(0, len(x), chunk):
            xb = torch.from_numpy(x[s:s + chunk]).to(device)
            if ce:
                yb = torch.from_numpy(y[s:s + chunk]).to(device)
                logits, A, omega = model(xb, return_attention=True)
                # (b T, vocab) rows: the class dimension contiguous (5x faster than (b, vocab, T) on the CPU)
                nll = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb.reshape(-1),
                                                  reduction="none").view(yb.shape)         # (b, T)
                ce_w.append(nll.double().mean(dim=1).cpu())
            else:
                A, omega = model.first_attention(xb)
            e = attention_entropy(A).double().cpu()
            ent_last.append(e[:, -1])
            ent_all.append(e.mean(dim=1))
            rho = rho + signal_propagation_frequency(omega).cpu().double().numpy() * len(xb)
    ent_last, ent_all = (torch.cat(v).numpy() for v in (ent_last, ent_all))
    n = len(ent_all)
    out = {"entropy_last": float(ent_last.mean()), "entropy_all": float(ent_all.mean()), "rho": (rho / n).tolist(),
           "windows": n, "entropy_windows": ent_all.tolist()}
    if ce:
        ce_w = torch.cat(ce_w).numpy()
        mean = float(ce_w.mean())
        out.update({"ce": mean, "perplexity": math.exp(mean), "ce_windows": ce_w.tolist()})
    return out


def flat_parameters(model):
    """Put the model's parameters in one contiguous buffer: each parameter's data becomes a view of
    ``flat`` (a leaf tensor), so that an elementwise optimiser makes one pass over ``flat`` instead
    of one per parameter (the same arithmetic per entry). Returns ``(flat, params)``; before each
    step set ``flat.grad`` from the gradients of ``params`` (:func:`flat_gradient`)."""
    params = list(model.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params]).requires_grad_(True)
    offset = 0
    for p in params:
        p.data = flat.detach()[offset:offset + p.numel()].view_as(p)
        offset += p.numel()
    return flat, params


def flat_gradient(flat, params, clip: float | None = None, *, loss=None, out=None):
    """Set ``flat.grad`` (:func:`flat_parameters`) to the gradients of ``params`` laid end to end, and
    clear theirs; with ``clip``, scaled as ``torch.nn.utils.clip_grad_norm_(params, clip)`` scales them
    (``min(1, clip / (||g||_2 + 1e-6))`` on the norm of all of them together).

    With ``loss``, the gradients are those of ``loss`` (``torch.autograd.grad``: the numbers that
    ``loss.backward()`` would leave in ``params``, without storing them there) and nothing is stored
    in ``flat.grad``; with ``out`` (a buffer of ``flat``'s size) they are written into it. Returns the
    flat gradient."""
    grads = torch.autograd.grad(loss, params) if loss is not None else [p.grad for p in params]
    g = torch.cat([g.reshape(-1) for g in grads], out=out)
    if clip is not None:
        # nn.utils.get_total_norm(grads, 2.0)'s calls on tensors of one device and dtype (without its grouping)
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        g.mul_(torch.clamp(clip / (total + 1e-6), max=1.0))
    if loss is None:
        flat.grad = g
        for p in params:
            p.grad = None
    return g


class FlatAdamW:
    """torch's functional AdamW (``torch.optim.adamw.adamw``, ``foreach=True`` as the
    ``torch.optim.AdamW(..., foreach=True)`` it replaces; Adam's defaults, decoupled weight decay, no
    amsgrad) on one flat parameter buffer (:func:`flat_parameters`): torch's own arithmetic on the one
    tensor, without the Optimizer's per-step bookkeeping (parameter groups, state dictionaries): the
    same parameters to the bit, step after step. This class only holds the state (the moment buffers,
    the step count as torch's float tensor, the options). ``step(grad)`` takes the flat gradient."""

    def __init__(self, flat, lr: float, weight_decay: float = 0.01, betas=(0.9, 0.999), eps: float = 1e-8):
        self.param = flat.detach()
        self.lr, self.weight_decay, self.eps = float(lr), float(weight_decay), float(eps)
        self.beta1, self.beta2 = (float(b) for b in betas)
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(self.param), torch.zeros_like(self.param)
        self.state_step = torch.tensor(0.0, dtype=torch.float32)

    @torch.no_grad()
    def step(self, grad) -> None:
        functional_adamw([self.param], [grad], [self.exp_avg], [self.exp_avg_sq], [], [self.state_step],
                         foreach=True, amsgrad=False, beta1=self.beta1, beta2=self.beta2, lr=self.lr,
                         weight_decay=self.weight_decay, eps=self.eps, maximize=False)


def train_locater_lm(corpus, rng: np.random.Generator, generator, *, d: int = 128, layers: int = 1, T: int = 64,
                     batch: int = 64, steps: int = 1000, lr: float = 2.5e-5, weight_decay: float = 0.01,
                     kappa1: float = 0.0, kappa2: float = 0.0, record_every: int = 50,
                     eval_split: str = "valid", eval_windows_max: int | None = None, device: str = "cpu") -> dict:
    """Train one :class:`PostLNTransformerLM` on ``corpus.train`` (random windows of ``T + 1``
    tokens drawn by ``rng``; initial weights from the CPU torch ``generator``, then moved to
    ``device``) with AdamW (Adam's
    defaults, decoupled weight decay as fairseq's Adam) on the mean next-token cross-entropy plus
    the LOCATER penalty (Sec. 6) when ``kappa1`` or ``kappa2`` is non-zero.

    Returns ``{"history": ..., "final": ...}``: every ``record_every`` steps the training
    cross-entropy of the batch, the penalty, the first block's ``||W_QK||_F^2``, ``tr W_QK``, the
    eq.-8 variance of its symmetric part, the batch's attention entropies and ``rho_i``; at the
    end the same statistics of ``W_QK`` and :func:`evaluate` on ``eval_split``.
    """
    for name, k in (("kappa1", kappa1), ("kappa2", kappa2), ("weight_decay", weight_decay)):
        validate.nonnegative(name, k)
    validate.positive("lr", lr)
    steps = validate.integer("steps", steps, low=0)
    record_every = validate.integer("record_every", record_every)
    model = PostLNTransformerLM(corpus.vocab_size, d, layers, T, generator=generator).to(device)
    # AdamW is elementwise: one step on the parameters laid end to end in one buffer does the per-parameter
    # arithmetic (torch's foreach AdamW loops over the 18 tensors on the CPU: 3x the time of the flat step);
    # FlatAdamW is torch's functional AdamW on that buffer, and the gradients go straight into one preallocated buffer
    flat, params = flat_parameters(model)
    opt = FlatAdamW(flat, lr=lr, weight_decay=weight_decay)
    grad = torch.empty_like(flat.detach())
    keys = ("step", "ce", "penalty", "frobenius_sq", "trace", "variance", "entropy_last", "entropy_all", "rho")
    hist = {k: [] for k in keys}
    reg = bool(kappa1 or kappa2)
    for step in range(steps + 1):
        xb, yb = (torch.from_numpy(a).to(device) for a in sample_windows(rng, corpus.train, T, batch))
        record = step % record_every == 0 or step == steps
        logits, A, omega = model(xb, return_attention=True)
        ce = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb.reshape(-1))
        pen = model.locater(kappa1, kappa2) if reg else None
        if record:
            with torch.no_grad():
                spec = eigenspectrum(model.qk(0).detach().cpu().double().numpy())
                e = attention_entropy(A)
                hist["step"].append(step)
                hist["ce"].append(float(ce))
                hist["penalty"].append(float(pen) if reg else 0.0)
                hist["frobenius_sq"].append(spec["frobenius_sq"])
                hist["trace"].append(spec["trace"])
                hist["variance"].append(spec["variance"])
                hist["entropy_last"].append(float(e[:, -1].mean()))
                hist["entropy_all"].append(float(e.mean()))
                hist["rho"].append(signal_propagation_frequency(omega.detach()).cpu().double().numpy().tolist())
        if step == steps:
            break
        opt.step(flat_gradient(flat, params, loss=ce + pen if reg else ce, out=grad))
    final = eigenspectrum(model.qk(0).detach().cpu().double().numpy())
    final.update(evaluate(model, corpus.split(eval_split), T, eval_windows_max))
    final["blocks"] = [eigenspectrum(model.qk(l).detach().cpu().double().numpy()) for l in range(layers)]
    return {"history": hist, "final": final}
