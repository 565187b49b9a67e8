"""Checks of the separate layer's initialisation, the scale of the escape time (Zhang, Singh, Latham,
Saxe 2025, App. C.2, eqs. 36-37).

Contains
--------
``linear_attention.separate.mc_init_norms``
    Eq. 37: the eq.-36 start has E sum_i v_i^2 = E sum ||k_ir||^2 = E sum ||q_ir||^2 = w_init^2
"""

from __future__ import annotations

import numpy as np

from verify import check
from verify.checks.linear_attention.merged_init import _outcome, _ratios, _settings
from verify.settings import Setting


@check("linear_attention.separate.mc_init_norms", covers=["linear_attention.separate.escape_time"],
       method="monte_carlo", needs=("torch",),
       title="Eq. 37: the eq.-36 start has E sum v_i^2 = E sum ||k_ir||^2 = E sum ||q_ir||^2 = w_init^2",
       settings=[*_settings(9), Setting("R", "int", quick=2, full=2, low=1, high=64, doc="rank R")])
def separate_init_norms(ctx):
    """Eq. 37 (norms ``O(w_init)``) with eq. 36's variances (``v_i ~ N(0, w_init^2/H)``, ``k_ir, q_ir``
    entries ``N(0, w_init^2/(H R D))``): exactly ``w_init^2`` in expectation for each of the three
    groups, the scale of the escape time (eq. 76). Drawn by :func:`verify.flows.separate.init_separate`
    and :meth:`SeparateLinearAttention.init_` (whose vector ``v_i`` and scalars ``k_ir`` must be 0).

    Controls: key and query entries of variance ``w_init^2 / D`` (no ``1/(H R)``: ratio ``H R``) and
    ``v_i`` of variance ``w_init^2`` (ratio ``H``)."""
    import torch

    from verify.flows.separate import init_separate
    from verify.models.linear_attention_separate import SeparateLinearAttention

    D, H, R, draws = ctx.setting("D"), ctx.setting("H"), ctx.setting("R"), ctx.setting("draws")
    rng, gen = ctx.rng, ctx.torch_generator("cpu")

    def flow(w):
        v, k, q = init_separate(rng, H, R, D, w)
        return [np.sum(v**2), np.sum(k**2), np.sum(q**2)]

    layer = SeparateLinearAttention(D, H, R, 1)
    leaks = []

    def torch_layer(w):
        layer.init_(gen, w)
        with torch.no_grad():
            leaks.append(max(layer.zero_block_norms()))
            return [float(torch.sum(t**2)) for t in (layer.value_scalars(), layer.keys(), layer.queries())]

    sources = {"flow start": _ratios(flow, draws), "torch layer": _ratios(torch_layer, draws)}
    return _outcome(["v", "k", "q"], sources,
                    {"v_i ~ N(0, w_init^2) (no 1/H)": np.array([H, 1.0, 1.0]),
                     "k, q entries ~ N(0, w_init^2 / D) (no 1/(H R))": np.array([1.0, H * R, H * R])},
                    "Eq. 37", f"D = {D}, H = {H}, R = {R}, {draws} draws per scale and source", max(leaks))
