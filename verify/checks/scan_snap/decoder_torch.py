"""Checks of ``scan_snap.decoder`` (see also :mod:`verify.checks.scan_snap.attention_torch`).

Contains
--------
``scan_snap.decoder.torch_zero_init_loss``
    1-layer transformer at zero initialisation: cross-entropy = ln M = -ln alpha_nn(1) (Lemma 5 of
    the Scan and Snap paper, Tian, Wang, Chen, Du 2023, Syn-Small of §8). The batch and the
    sequence length T are named settings (``python -m verify settings scan_snap.decoder.torch_zero_init_loss``).
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.models.scan_snap import OneLayerTransformer, syn_small
from verify.settings import Setting


def _threads():
    from verify.models.linear_attention import cpu_threads

    return cpu_threads(1)  # tiny matrices: one thread avoids OpenMP overhead on a shared machine


@check("scan_snap.decoder.torch_zero_init_loss", aliases=["scan_snap.torch.zero_init_loss"],
       method="torch", covers=["scan_snap.decoder.alpha_correct"],
       title="1-layer transformer at zero initialisation: cross-entropy = ln M = -ln alpha_nn(1)",
       settings=[Setting("batch", "int", quick=256, full=256, low=1, high=100_000, doc="sampled sequences"),
                 Setting("T", "int", quick=128, full=128, low=2, high=100_000,
                         doc="sequence length T (T - 1 contextual tokens and the query)")])
def zero_init_loss(ctx):
    import torch

    batch, T = ctx.setting("batch"), ctx.setting("T")
    classes = syn_small()
    M, K = classes.M, classes.K
    g = ctx.torch_generator()
    with _threads():
        model = OneLayerTransformer(M, init="zero", generator=g)
        context, query, label, _ = classes.sample(batch, T, g)
        with torch.no_grad():
            logits, b = model(context, query)
            loss = float(torch.nn.functional.cross_entropy(logits, label))
    pred = -np.log(theory.get("scan_snap.decoder.alpha_correct")(s=1, M=M, eta_Y=1.0))
    tol = 1e-14
    disc = abs(loss - pred) / pred
    return Outcome(
        measured=loss, predicted=pred, discrepancy=disc, tolerance=tol,
        criterion="relative |loss - ln M| <= 1e-14 (W_V = 0 gives zero logits; float64 log-sum-exp round-off "
                  "~1e-16); ln M = -ln alpha_nn(1) of Lemma 5 (h*(0) = 0)",
        # expected: the gap of each wrong closed form from ln M, on the statistic's scale
        controls=[Control("ln K (number of classes)", abs(loss - np.log(K)) / pred, tol,
                          expected=float(abs(pred - np.log(K)) / pred)),
                  Control("ln (M - 1)", abs(loss - np.log(M - 1)) / pred, tol,
                          expected=float(abs(pred - np.log(M - 1)) / pred))],
        details={"M": M, "K": K, "batch": batch, "T": T,
                 "attention uniform at init (max |b - 1/(T-1)|)": float((b - 1 / (T - 1)).abs().max())},
    )
