"""The authors' synthetic protocol of Tian, Wang, Chen, Du 2023 ("Scan and Snap", §8, Figs. 5, 6, 11, 12):
the Syn-Medium data sets and the 1-layer transformer trained directly in the (Y, Z) parameterisation
(§3.1), with the authors' random initialisation.

Data (§8; the authors' generator, ``Dataset2`` of facebookresearch/luckmatters): ``num_last`` query tokens,
each with ``num_next_per_last`` next tokens (K = num_last x num_next_per_last classes). Every class draws its
contextual tokens from ``num_common`` global common tokens (unnormalised weight 1 each) and its own
``num_unique`` distinct tokens (weights linspace(0.1, 1, num_unique)); ids: common tokens, distinct blocks by
class, query tokens, next tokens. Fig. 6's panels are num_last = 1, 3, 5, 10 with two next tokens per query
(K = 2, 6, 10, 20; M = 33, 79, 125, 240).

Model (§3.1, ``Model2`` of the same code): Y and Z are free M x M matrices. The query m attends to the T - 1
contextual tokens with weights softmax_t(z_{m, x_t}) (eq. 1 with Z = U W_Q W_K^T U^T/sqrt(d)), the output is
l2-normalised, LN(X^T b) (optionally LN(X^T b + e_m): the authors' residual flag), and the logits are
Y^T LN(X^T b). ``init="random"`` draws every entry of Y and Z from U(-1/sqrt(M), 1/sqrt(M)) (the ``nn.Linear``
default the authors' Fig. 6 runs use, ``zero_init=false``), ``init="zero"`` starts from Y = Z = 0 (§8's text).
Training: two optimisers (SGD with momentum 0.9, or Adam), decoder rate eta_Y on Y, attention rate eta_Z on Z,
batch 128, T = 128, 100 iterations, fresh sequences every iteration.

Contents
--------
syn_medium          the data set of one Fig. 6 panel (a SequenceClasses)
ReparamTransformer  torch module holding Y and Z
train_reparam       the training loop; returns the attention c_n of the learned Z along the run
train_reparam_side_by_side  several learning-rate pairs from one initialisation on the same batches, stacked
draw_batches        the batches a seeded run draws, to share between runs (common random numbers)
recall_curve        Figs. 11-12's statistic: the fraction of distinct tokens whose attention reaches a threshold
query_attention     the attention map of each class's query over the vocabulary, softmax_l z_{psi(n), l}
descent_rate        the descent of the recall-threshold line around 1/M (Figs. 11-12), as a least-squares slope
top_distinct        the k distinct tokens of each class with the largest attention (Fig. 5)
"""

from __future__ import annotations

import math

import numpy as np

from verify.models.scan_snap import SequenceClasses, syn_medium  # noqa: F401  (syn_medium: re-exported)
from verify.models.scan_snap import (side_by_side_mix, side_by_side_parameters, side_by_side_rates,
                                     side_by_side_stack, side_by_side_step)

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover
    torch = nn = None

__all__ = ["syn_medium", "ReparamTransformer", "train_reparam", "train_reparam_side_by_side", "draw_batches",
           "recall_curve", "query_attention", "descent_rate", "top_distinct"]




def recall_curve(c: np.ndarray, classes: SequenceClasses, thresholds) -> np.ndarray:
    """Figs. 11-12: for each threshold, the fraction of the distinct tokens of class n whose attention c_{l|n}
    reaches it, averaged over the classes (``c`` (K, M) or (..., K, M); returns (..., len(thresholds)))."""
    c = np.asarray(c)
    mask = classes.distinct
    th = np.asarray(thresholds, dtype=float)
    hit = (c[..., None] >= th) & mask[..., None]
    return (hit.sum(-2) / mask.sum(-1)[:, None]).mean(-2)


def query_attention(Z: np.ndarray, classes: SequenceClasses) -> np.ndarray:
    """The attention map of each class's query token over the vocabulary, softmax_l z_{psi(n), l} (K, M): the
    weights a sequence holding every token once would get (App. G's "softmax value for every query token"; a uniform
    map is 1/M). ``Z`` (M, M) or (..., M, M)."""
    Z = np.asarray(Z, dtype=float)
    if Z.shape[-2:] != (classes.M, classes.M):
        raise ValueError(f"Z: expected (..., {classes.M}, {classes.M}), got shape {Z.shape}")
    rows = Z[..., classes.psi, :]
    a = np.exp(rows - rows.max(-1, keepdims=True))
    return a / a.sum(-1, keepdims=True)


def descent_rate(a: np.ndarray, classes: SequenceClasses, lo: float = 0.5, hi: float = 2.0,
                 points: int = 61) -> np.ndarray:
    """How fast the recall-threshold line of Figs. 11-12 descends around 1/M: minus the least-squares slope of
    recall_curve(a) against x = M tau over ``points`` thresholds tau = x/M, x uniform in [lo, hi] (a factor 2 either
    side of the uniform 1/M by default). A sparse map (few distinct tokens far above 1/M, many below) descends
    slowly; a dense one, every distinct token near 1/M, drops from 1 to 0 inside the window. ``a`` (..., K, M):
    attention maps over the vocabulary (:func:`query_attention`); returns (...)."""
    if not 0 < lo < hi:
        raise ValueError(f"lo: need 0 < lo < hi, got lo = {lo}, hi = {hi}")
    if points < 2:
        raise ValueError(f"points: need at least 2 thresholds, got {points}")
    x = np.linspace(lo, hi, points)
    R = recall_curve(a, classes, x / classes.M)
    xc = x - x.mean()
    return -(R * xc).sum(-1) / (xc**2).sum()


def top_distinct(c: np.ndarray, classes: SequenceClasses, k: int = 3) -> list[frozenset]:
    """The ``k`` distinct tokens of each class with the largest attention c_{l|n} (Fig. 5's "subset of distinct
    tokens" a run focuses on), as sets of token ids, one per class. ``c`` (K, M)."""
    c = np.asarray(c, dtype=float)
    if c.shape != (classes.K, classes.M):
        raise ValueError(f"c: expected ({classes.K}, {classes.M}), got shape {c.shape}")
    n_dt = int(classes.distinct.sum(1).min())
    if not 1 <= k <= n_dt:
        raise ValueError(f"k: need 1 <= k <= {n_dt} (distinct tokens per class), got {k}")
    out = []
    for n in range(classes.K):
        ids = np.flatnonzero(classes.distinct[n])
        out.append(frozenset(int(i) for i in ids[np.argsort(-c[n, ids], kind="stable")[:k]]))
    return out


if nn is not None:

    class ReparamTransformer(nn.Module):
        """The 1-layer transformer in the (Y, Z) parameterisation of §3.1 (the authors' ``Model2``).

        Parameters
        ----------
        M : int
            Vocabulary size.
        init : {"random", "zero"}
            ``random``: entries U(-1/sqrt(M), 1/sqrt(M)) (the authors' Fig. 6 runs); ``zero``: Y = Z = 0.
        residual : bool
            Add the query's one-hot before the normalisation (LN(X^T b + e_m); the authors' residual flag).
        generator : torch.Generator
        """

        def __init__(self, M: int, init: str = "random", residual: bool = False, generator=None):
            super().__init__()
            if M < 2:
                raise ValueError(f"M: need M >= 2, got {M}")
            if init not in ("random", "zero"):
                raise ValueError(f"init: expected 'random' or 'zero', got {init!r}")
            self.M, self.residual = M, residual
            b = 1.0 / math.sqrt(M)
            if init == "random":
                Y, Z = ((2 * torch.rand(M, M, generator=generator, dtype=torch.float64) - 1) * b for _ in range(2))
            else:
                Y, Z = torch.zeros(M, M, dtype=torch.float64), torch.zeros(M, M, dtype=torch.float64)
            self.Y, self.Z = nn.Parameter(Y), nn.Parameter(Z)

        def forward(self, context, query):
            """Decoder logits (B, M) for contexts (B, T-1) and queries (B,)."""
            scores = torch.gather(self.Z[query], 1, context)           # z_{m, x_t}
            b = torch.softmax(scores, dim=-1)
            xb = torch.zeros(context.shape[0], self.M, dtype=b.dtype).scatter_add(1, context, b)   # X^T b
            if self.residual:
                xb = xb + nn.functional.one_hot(query, self.M).to(xb.dtype)
            return (xb / xb.norm(dim=1, keepdim=True)) @ self.Y          # Y^T LN(.)

    def train_reparam(classes: SequenceClasses, *, eta_Y: float, eta_Z: float, steps: int = 100, batch: int = 128,
                      T: int = 128, optimizer: str = "sgd", momentum: float = 0.9, init: str = "random",
                      residual: bool = False, generator=None, record_every: int | None = None, batches=None):
        """Train :class:`ReparamTransformer` on ``classes`` (the authors' protocol). Returns a dict: ``c`` (the
        long-sequence attention c_n = softmax(ln P + z_{psi(n)}) of the learned Z, (R, K, M) at the recorded
        steps), ``steps``, ``loss`` (per step), ``Y``, ``Z`` (final, numpy).

        ``batches``: ``steps`` pre-drawn (context, query, label) batches to train on instead of drawing them from
        ``generator`` after the initialisation (:func:`draw_batches` gives the very batches a run would draw, so
        runs that share a seed can share the sampling)."""
        if optimizer not in ("sgd", "adam"):
            raise ValueError(f"optimizer: expected 'sgd' or 'adam', got {optimizer!r}")
        model = ReparamTransformer(classes.M, init=init, residual=residual, generator=generator)
        if optimizer == "sgd":
            opt_y = torch.optim.SGD([model.Y], lr=eta_Y, momentum=momentum)
            opt_z = torch.optim.SGD([model.Z], lr=eta_Z, momentum=momentum)
        else:
            opt_y = torch.optim.Adam([model.Y], lr=eta_Y)
            opt_z = torch.optim.Adam([model.Z], lr=eta_Z)
        every = record_every or steps

        def attn():
            return classes.attention(model.Z.detach().numpy())

        cs, rec, losses = [attn()], [0], []
        if batches is not None and len(batches) != steps:
            raise ValueError(f"batches: expected {steps} batches (one per step), got {len(batches)}")
        for s in range(steps):
            if batches is None:
                context, query, label, _ = classes.sample(batch, T, generator)
            else:
                context, query, label = batches[s][:3]
            loss = nn.functional.cross_entropy(model(context, query), label)
            opt_y.zero_grad()
            opt_z.zero_grad()
            loss.backward()
            opt_y.step()
            opt_z.step()
            losses.append(loss.item())
            if (s + 1) % every == 0:
                cs.append(attn())
                rec.append(s + 1)
        return {"c": np.array(cs), "steps": np.array(rec), "loss": np.array(losses),
                "Y": model.Y.detach().numpy().copy(), "Z": model.Z.detach().numpy().copy()}

    def train_reparam_side_by_side(classes: SequenceClasses, rates, *, steps: int = 100, optimizer="sgd",
                                   momentum: float = 0.9, init: str = "random", residual: bool = False,
                                   generator=None, batches=None) -> list[dict]:
        """:func:`train_reparam` for several learning-rate pairs ``rates`` = [(eta_Y, eta_Z), ...] from one
        initialisation (drawn from ``generator``) on the same ``batches`` (:func:`draw_batches`; common random
        numbers), trained side by side: (Y, Z) stacked over the runs, one forward and backward pass per step (the
        runs' losses summed: each run's gradient is its own), the optimiser's update per run. The per-operation
        overhead of the small matrices is paid once, not once per run. ``optimizer``: ``"sgd"`` or ``"adam"``
        for every run, or one of them per run (a list as long as ``rates``: e.g. the same rates under both
        optimisers in one pass). Returns one dict per pair, as :func:`train_reparam` with ``record_every=None``
        (``c`` at the start and the end)."""
        kinds = [optimizer] * len(rates) if isinstance(optimizer, str) else list(optimizer)
        bad = [k for k in kinds if k not in ("sgd", "adam")]
        if bad or not isinstance(optimizer, (str, list, tuple)):
            raise ValueError(f"optimizer: expected 'sgd' or 'adam' (or one per run), got {optimizer!r}")
        rates = side_by_side_rates(rates, steps, batches)
        if len(kinds) != len(rates):
            raise ValueError(f"optimizer: expected one optimiser per run ({len(rates)}), got {len(kinds)}")
        model = ReparamTransformer(classes.M, init=init, residual=residual, generator=generator)
        R, M = len(rates), classes.M
        # one set of stacked parameters and one optimiser per kind; the runs are computed kind by kind
        groups = []
        for kind in dict.fromkeys(kinds):
            idx = [r for r in range(R) if kinds[r] == kind]
            cls, options = (torch.optim.SGD, {"momentum": momentum}) if kind == "sgd" else (torch.optim.Adam, {})
            runs, opt = side_by_side_parameters(
                {"Y": (model.Y.detach(), [rates[r][0] for r in idx]),
                 "Z": (model.Z.detach(), [rates[r][1] for r in idx])},
                cls, **options)
            groups.append((idx, runs, opt))
        order = [r for idx, _, _ in groups for r in idx]
        opts = [opt for _, _, opt in groups]
        c0 = classes.attention(model.Z.detach().numpy())
        losses = np.zeros((steps, R))
        for s in range(steps):
            context, query, label = batches[s][:3]
            W = [side_by_side_stack(runs) for _, runs, _ in groups]
            Y, Z = ((W[0][k] if len(W) == 1 else torch.cat([w[k] for w in W])) for k in ("Y", "Z"))  # (R, M, M)
            xb = side_by_side_mix(Z[:, query], context, M)                              # X^T b per run
            if residual:
                xb = xb + nn.functional.one_hot(query, M).to(xb.dtype)
            losses[s, order] = side_by_side_step(opts, torch.bmm(xb / xb.norm(dim=2, keepdim=True), Y), label)
        out = [None] * R
        for idx, runs, _ in groups:
            for j, r in enumerate(idx):
                Zr = runs["Z"][j].detach().numpy().copy()
                out[r] = {"c": np.array([c0, classes.attention(Zr)]), "steps": np.array([0, steps]),
                          "loss": losses[:, r].copy(), "Y": runs["Y"][j].detach().numpy().copy(), "Z": Zr}
        return out

    def draw_batches(classes: SequenceClasses, seed: int, *, steps: int = 100, batch: int = 128, T: int = 128,
                     init: str = "random"):
        """The ``steps`` batches that :func:`train_reparam` draws with ``generator=torch.Generator().manual_seed(seed)``
        and ``init`` (after the initialisation of Y and Z, which this replays), for runs that share them."""
        g = torch.Generator().manual_seed(seed)
        ReparamTransformer(classes.M, init=init, generator=g)
        return [classes.sample(batch, T, g)[:3] for _ in range(steps)]

else:  # without torch the names still import (so the checks register); using them says what is missing

    _NEEDS_TORCH = "needs torch: pip install 'attention-dynamics-theory[torch]'"

    class ReparamTransformer:  # noqa: D101 (the torch class above documents it)
        def __init__(self, *args, **kwargs):
            raise ImportError(f"ReparamTransformer {_NEEDS_TORCH}")

    def train_reparam(*args, **kwargs):  # noqa: D103
        raise ImportError(f"train_reparam {_NEEDS_TORCH}")

    def draw_batches(*args, **kwargs):  # noqa: D103
        raise ImportError(f"draw_batches {_NEEDS_TORCH}")

    def train_reparam_side_by_side(*args, **kwargs):  # noqa: D103
        raise ImportError(f"train_reparam_side_by_side {_NEEDS_TORCH}")
