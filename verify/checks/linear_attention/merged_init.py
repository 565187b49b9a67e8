"""Checks of the merged layer's initialisation, the scale ``w_init`` of eqs. 10 and 54 (Zhang, Singh,
Latham, Saxe 2025, App. C.2, eqs. 34-35); the helpers serve the separate layer's too
(:mod:`verify.checks.linear_attention.separate_init`).

Contains
--------
``linear_attention.merged.mc_init_norms``
    Eq. 35: the eq.-34 start has E sum_i v_i^2 = E sum_i ||U_i||_F^2 = w_init^2, at every scale, in the exact
    flow's start and in the torch layer's
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.settings import Setting
from verify.stats import batch_mean, z_threshold

#: The scales the norms are checked at (eqs. 35 and 37 hold at every w_init: the draws scale with it).
W_INITS = (1e-6, 1e-2, 1.0)


def _settings(full_heads: int):
    return [Setting("D", "int", quick=4, full=8, low=1, high=64, doc="token dimension D"),
            Setting("H", "int", quick=3, full=full_heads, low=1, high=64, doc="heads H"),
            # quick 500 (was 2000), sized by the controls (both checks, seeds 0-19: 20/20; merged worst
            # discrepancy/tolerance 0.654, controls' expected z >= 10.2 and 41.5 x the threshold; separate
            # worst 0.553, >= 10.2 and 72.6 x)
            Setting("draws", "int", quick=500, full=20000, low=100, high=10**7,
                    doc="initialisations drawn per scale and per source")]


def _ratios(draw, draws: int) -> np.ndarray:
    """(draws, groups) squared norms over w_init^2 for every scale of :data:`W_INITS`, stacked."""
    return np.concatenate([np.array([draw(w) for _ in range(draws)]) / w**2 for w in W_INITS])


def _outcome(groups: list[str], sources: dict, wrong: dict, eq: str, setting: str, zero_blocks: float) -> Outcome:
    """z-scores of the mean squared norms over w_init^2 against 1 (per group, scale and source), and the
    controls: other readings of the initialisation's variances, whose expected ratios are in ``wrong``.
    ``zero_blocks``: the largest block the theory sets to zero in the torch starts; it must be exactly 0
    (the initialisation writes zeros there; nothing is computed)."""
    zs, means, ses, ests = [], {}, {}, {}
    for name, R in sources.items():
        n = len(R) // len(W_INITS)
        for k, w in enumerate(W_INITS):
            est = batch_mean()
            est.add(R[k * n:(k + 1) * n])
            e = est.result()
            zs.append((e.mean - 1.0) / e.se)
            means[f"{name}, w_init = {w:g}"] = e.mean
            ses[f"{name}, w_init = {w:g}"] = e.se
            ests[(name, w)] = e
    z = np.concatenate(zs)
    z_crit = z_threshold(z.size)
    controls = []
    for label, expect in wrong.items():
        # the reading's prediction for each group (others as the paper's), against the same estimates
        measured = max(float(np.max(np.abs((e.mean - expect) / e.se))) for e in ests.values())
        expected = max(float(np.max(np.abs((1.0 - expect) / e.se))) for e in ests.values())
        controls.append(Control(label + ": max |z|", measured, z_crit, expected=expected))
    worst = float(np.max(np.abs(z)))
    return Outcome(
        measured={"E ||group||^2 / w_init^2 (" + ", ".join(groups) + ")": means,
                  "largest zero block of the torch starts": zero_blocks},
        predicted={"E ||group||^2 / w_init^2": 1.0, "zero blocks": 0.0},
        discrepancy=worst, tolerance=z_crit, passed=bool(worst <= z_crit and zero_blocks == 0.0),
        criterion=(f"{eq}: the mean squared norm of every group ({', '.join(groups)}) over w_init^2 is 1 at w_init "
                   f"= {', '.join(f'{w:g}' for w in W_INITS)}, for every source ({', '.join(sources)}): max |z| "
                   f"over {z.size} means <= {z_crit:.2f} (Bonferroni, false alarm 1e-6), and the torch starts' "
                   f"zero blocks exactly 0; {setting}"),
        controls=controls,
        details={"standard errors": ses, "sources": list(sources), "w_init": list(W_INITS)},
    )


@check("linear_attention.merged.mc_init_norms", covers=["linear_attention.merged.plateau_time"],
       method="monte_carlo", needs=("torch",),
       title="Eq. 35: the eq.-34 start has E sum v_i^2 = E sum ||U_i||_F^2 = w_init^2 at every scale",
       settings=_settings(8))
def merged_init_norms(ctx):
    """Eq. 35 says the layers' norms are ``O(w_init)``; with eq. 34's variances (``v_i ~ N(0,
    w_init^2/H)``, ``U_i`` entries ``N(0, w_init^2/(H D^2))``) exactly ``E sum_i v_i^2 = E sum_i
    ||U_i||_F^2 = w_init^2``, the normalisation the plateau time (eq. 54) and the sigmoid (eq. 10) are
    written in. Drawn by the exact flow's start (:func:`verify.flows.merged.init_merged`) and by the torch
    layer (:meth:`MergedLinearAttention.init_`, whose vector blocks must be exactly 0).

    Controls: ``U_i`` entries of variance ``w_init^2 / D^2`` (no ``1/H``: ratio ``H``) and ``v_i`` of
    variance ``w_init^2`` (ratio ``H``)."""
    import torch

    from verify.flows.merged import init_merged
    from verify.models.linear_attention import MergedLinearAttention

    D, H, draws = ctx.setting("D"), ctx.setting("H"), ctx.setting("draws")
    rng, gen = ctx.rng, ctx.torch_generator("cpu")

    def flow(w):
        v, U = init_merged(rng, H, D, w)
        return [np.sum(v**2), np.sum(U**2)]

    layer = MergedLinearAttention(D, H, 1)
    leaks = []

    def torch_layer(w):
        layer.init_(gen, w)
        with torch.no_grad():
            leaks.append(max(layer.zero_block_norms()))
            return [float(torch.sum(layer.value_scalars()**2)), float(torch.sum(layer.kq_blocks()**2))]

    sources = {"flow start": _ratios(flow, draws), "torch layer": _ratios(torch_layer, draws)}
    return _outcome(["v", "U"], sources,
                    {"v_i ~ N(0, w_init^2) (no 1/H)": np.array([H, 1.0]),
                     "U_i entries ~ N(0, w_init^2 / D^2) (no 1/H)": np.array([1.0, H])},
                    "Eq. 35", f"D = {D}, H = {H}, {draws} draws per scale and source", max(leaks))
