"""The real-text experiments of Scan and Snap (Tian, Wang, Chen, Du 2023, Sec. 8 Fig. 7, App. G Fig. 10):
a causal transformer language model in the ordinary parameterisation (token embedding ``U`` and
``W_Q``, ``W_K``, ``W_V``, not the ``Y``, ``Z`` of Sec. 3.1) trained by plain SGD at one learning
rate ``eta`` for every parameter, the attention of the lowest layer watched on the validation split.

The model is :class:`verify.models.localization_lm.PostLNTransformerLM` (embedding scaled by
``sqrt(d)`` plus sinusoidal positions, Post-LN blocks with one softmax attention head and a ReLU
feed-forward layer of width ``d``, an output projection): the block of the PyTorch language-model
tutorial that the authors' WikiText runs use (one head, ``d_hid = emsize``, positions on). The
optimiser is the authors' too: SGD without momentum at a constant learning rate, the gradient's
global norm clipped to 0.5 before each step. Not reproduced: dropout 0.2 (left out, as in the
localization LM, so that the measured attention is the trained one's), the tutorial's uniform
initialisation of the embedding and decoder, and the decoder's bias.

The attention statistic is the tutorial's and the paper's: the Shannon entropy of each causal
attention row of the first block, averaged over the queries of a window
(:func:`verify.models.localization_lm.evaluate`, ``entropy_windows``), on the consecutive
non-overlapping windows of the validation split.

Contents
--------
train_sgd_lm     SGD training with clipping on given training token ids; validation records
"""

from __future__ import annotations

import numpy as np

from .. import validate
from ..tasks.text_corpus import sample_windows
from .localization_lm import PostLNTransformerLM, evaluate, flat_gradient, flat_parameters

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover
    torch = nn = None

__all__ = ["CLIP_NORM", "train_sgd_lm"]

#: The authors' WikiText runs (the PyTorch tutorial's training loop): clip the gradient's global norm to 0.5.
CLIP_NORM = 0.5


def train_sgd_lm(train_ids, valid_ids, vocab_size: int, rng: np.random.Generator, generator, *, d: int = 200,
                 layers: int = 1, T: int = 35, batch: int = 20, steps: int = 1000, lr: float = 5.0,
                 clip: float = CLIP_NORM, records: int = 8, eval_windows_max: int | None = None,
                 device: str = "cpu") -> dict:
    """Train one :class:`PostLNTransformerLM` by SGD (no momentum, constant ``lr``, gradient norm
    clipped to ``clip``) on random windows of ``T + 1`` tokens of ``train_ids`` drawn by ``rng``
    (initial weights from the CPU torch ``generator``), minimising the mean next-token
    cross-entropy.

    ``records + 1`` times (step 0 and every ``steps / records`` steps) the model is evaluated on the
    windows of ``valid_ids`` (the first ``eval_windows_max``). Returns ``{"history": {"step",
    "entropy", "ce", "train_ce"}, "entropy_windows": (records + 1, windows) array, "final":
    evaluate(...) at the end}``; ``entropy`` is the first block's attention entropy (mean over
    windows of the mean over queries; ``entropy_windows`` per window, for paired comparisons),
    ``ce`` the validation cross-entropy (at step 0 and at the end; None at the records between),
    ``train_ce`` the batch's at that step.
    """
    validate.positive("lr", lr)
    validate.positive("clip", clip)
    steps = validate.integer("steps", steps)
    records = validate.integer("records", records)
    if steps % records:
        raise ValueError(f"records: expected a divisor of steps = {steps}, got {records}")
    every = steps // records
    model = PostLNTransformerLM(vocab_size, d, layers, T, generator=generator).to(device)
    # SGD and the clipping's scaling are elementwise: one pass over the parameters laid end to end in one buffer
    # does the per-parameter arithmetic (torch's foreach ops loop over the 18 tensors on the CPU); the global norm
    # is clip_grad_norm_'s, from the per-parameter gradients
    flat, params = flat_parameters(model)
    # torch's SGD step (foreach, no momentum) on one tensor is flat += -lr * grad: done here on the buffer, with
    # the gradients written straight into one preallocated buffer (the same numbers to the bit)
    param, grad, lr = flat.detach(), torch.empty_like(flat.detach()), float(lr)
    hist = {"step": [], "entropy": [], "ce": [], "train_ce": []}
    windows = []
    for step in range(steps + 1):
        xb, yb = (torch.from_numpy(a).to(device) for a in sample_windows(rng, train_ids, T, batch))
        logits = model(xb)
        ce = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb.reshape(-1))
        if step % every == 0:
            # the validation cross-entropy at the start and the end only (between them the records need the
            # first block's attention alone: a quarter of the cost)
            ev = evaluate(model, valid_ids, T, eval_windows_max, ce=step in (0, steps))
            hist["step"].append(step)
            hist["entropy"].append(ev["entropy_all"])
            hist["ce"].append(ev.get("ce"))
            hist["train_ce"].append(float(ce.detach()))
            windows.append(ev["entropy_windows"])
        if step == steps:
            break
        param.add_(flat_gradient(flat, params, clip, loss=ce, out=grad), alpha=-lr)
    return {"history": hist, "entropy_windows": np.asarray(windows), "final": ev}
