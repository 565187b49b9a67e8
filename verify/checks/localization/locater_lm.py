"""Torch check of LOCATER in a real language model (Bao, Hataya, Karakida 2024, Sec. 6-7, Figs. 6-12).

``localization.locater.torch_language_model``
    The paper's model family (:class:`verify.models.localization_lm.PostLNTransformerLM`: token
    embedding and sinusoidal positions, Post-LN blocks with one softmax attention head, ReLU
    feed-forward, all widths ``d``) trained by next-token cross-entropy on real text
    (:mod:`verify.tasks.text_corpus`: the WikiText-2 token files when ``$WIKITEXT2_DIR`` names their
    folder, else the English text of ``pydoc_data.topics``), once without LOCATER and once per
    ``kappa2`` of a sweep with ``kappa1 = 100`` (Sec. 7), every run from the same initialisation and
    the same stream of training windows (common random numbers: the runs differ only by the
    regulariser). The statistics are those of Figs. 6-7: the eigenspectrum scale
    ``tr(W_QK^T W_QK)`` of the first block (Sec. 6), the attention entropy (mean over the queries of
    their causal rows), the perplexity, and ``rho_i``, the frequency of ``u_i in [0, 1]`` for the
    last query (Fig. 7); all measured after training on the validation split's consecutive
    windows.

Profiles: quick is Fig. 8's model (``d = 32``, one layer) trained for fewer sequence-steps than
the paper: ``T = 32``, batch 16, vocabulary capped at 500 words, 400 Adam(W) steps at lr ``3e-3``
(the paper's ``1e-4`` for ``d = 32`` would need ~10^4 steps to move the weights as far),
``kappa2 in {0, 0.1, 1}``, pydoc corpus: four runs. Full is the paper's Sec. 7: ``d = 128``,
``T = 64``, batch 64, 50,000 steps at lr ``2.5e-5``, weight decay 0.01,
``kappa2 in {0, 1e-3, 1e-2, 1e-1, 1}``, 1 and 6 layers (Figs. 6, 12); Figs. 8-11 are the settings
``d = 32``/``128`` with ``L = 1, 3, 6`` (``--set d=32 --set L=1,3,6 --set lr=1e-4``). Not
reproduced: fairseq's dropout 0.1 and FP16; how fairseq adds the penalty to its summed loss is not
said in the paper, so the objective is the printed one, ``J + kappa1 tr(W_QK^T W_QK) +
kappa2 (tr W_QK - 1)^2`` with ``J`` the mean cross-entropy per token.

What the numbers show, and what the check asserts (every claim must hold, per layer count; the
paper's printed claims are negative controls, which must be rejected):

1. **Scale vs kappa2 (Fig. 6(B), reversed).** With ``kappa1 = 100`` the penalty dominates the
   loss's gradient on ``W_QK``: its scale collapses from about 8 to 1e-6..1e-3 and then sits on
   the regulariser's stationary points, where ``tr(W_QK^T W_QK) = kappa2 t (1 - t) / kappa1`` with
   ``t = tr W_QK`` (``localization.locater.stationary_scale``: 0 at ``kappa2 = 0``, growing with
   ``kappa2``). Asserted: the final scale and the eq.-8 variance both rise from each ``kappa2`` of
   the grid to the next; at the largest ``kappa2`` the scale equals the stationary scale within
   5 %, the prediction lying at least 20 times above the ``kappa2 = 0`` run's scale (how far the
   optimiser still is from stationarity). Controls: the printed claim (the scale shrinks with
   ``kappa2``); the stationary scale of the no-LOCATER run's ``W_QK`` (must be far off).
2. **Attention entropy vs kappa2 (Fig. 6(C), refuted).** The kappa2 term adds ``a x_t^T P x_s``
   (``W_QK = a P``, ``a <= 0.01``) to logits that LOCATER has already made nearly constant.
   Asserted: every ``kappa2`` moves the entropy by less than 1 % of what ``kappa1`` does (the
   no-LOCATER run vs ``kappa2 = 0``). Control: the printed claim read as a rise by at least that
   1 %. The sign of the tiny change is reported (``entropy_largest_kappa2_minus_0``, with its
   paired z over the validation windows): mostly a decrease, not at every seed.
3. **Perplexity (Fig. 6(D) and Sec. 7, refuted).** Asserted: every ``kappa2`` moves the validation
   cross-entropy by less than 0.01 nats (1 % of perplexity), and every LOCATER run ends with a
   higher validation cross-entropy than the no-LOCATER run (the gap grows with training).
   Controls: the printed claim (better perplexity with LOCATER); the 0.01-nat bound applied to
   the no-LOCATER run (must be exceeded: the bound can see an effect of LOCATER's size).
4. **Higher attention entropy with LOCATER (Sec. 7's text, holds).** Asserted: every LOCATER run
   ends with a higher entropy than the no-LOCATER run.
5. **rho stripes (Fig. 7, reversed).** The spread of ``rho_i`` over positions, in units of the
   largest binomial standard error ``0.5 / sqrt(windows)``: small with LOCATER (its logits vary
   by less than 1 across most keys, so ``u_i`` lies in ``[0, 1]``), large without (``rho_i`` rises
   from near 0 at the first positions to 1 at the last: recent tokens are attended). Asserted:
   every LOCATER run's spread is below the no-LOCATER run's. Control: the printed claim (stripes
   with LOCATER, uniform without).
6. **Signal vanishing avoided (Sec. 6, holds).** Asserted: ``min_i rho_i >= 0.5`` in every
   LOCATER run. Control: the no-LOCATER run must fail it (its early positions fall towards 0 as
   its scale grows).

The two learning phases of Sec. 7 are reported, not asserted (the remark names no statistic):
``phase_contrast`` is the mean rate of change of a statistic over the first fifth of training
(the paper's 10^4 of 5 x 10^4 iterations) over its rate in the rest.

Measured (quick profile, seeds 0-19): passes 20/20, 35-50 s per run on a 2-core machine shared
with other jobs (4.5-5.4 s of CPU at seed 0, the least of three runs at load 9-10, with AdamW's step in
one pass over the parameters laid end to end in one buffer; 6.0-7.4 s side by side with torch's foreach
AdamW, which loops over the 18 tensors on the CPU: the same training to the bit). The step is now
torch's functional AdamW (torch's own arithmetic) without the Optimizer's per-step bookkeeping
(:class:`~verify.models.localization_lm.FlatAdamW`,
gradients by ``torch.autograd.grad`` into one buffer; results identical to the bit at seeds 0-2):
4.7-5.0 s of CPU after the imports (as before, within the noise of a shared machine), about 1 CPU-s
less in a process of its own (a process's first torch.optim optimiser imports ``torch._dynamo``).
Batch 12 (a quarter less work per step) was tried and rejected: at seed 5 the no-LOCATER run ended
0.0045 nats from ``kappa2 = 0``, inside the 0.01-nat bound its control must exceed.
Claim by claim, the worst seed against its bound: (1) smallest
log ratio 0.33 (> 0), stationary-scale error 0.34 % (<= 5 %; prediction 64-2800 times the
kappa2 = 0 residual); (2) 0.25 % of kappa1's entropy effect (<= 1 %); (3) 0.0016 nats (<= 0.01),
LOCATER's excess cross-entropy 0.019-0.062 nats (> 0; paired z 3.1-11.4, reported); (4) LOCATER's
entropy 0.76-1.00 nats higher; (5) stripe 0.00-0.50 with LOCATER vs 7.1-9.6 without; (6)
``min_i rho_i`` 0.92-1.00 with LOCATER (>= 0.5). Controls, worst seed: printed 6(B) log ratio 3.5
(> 0), stationary scale of the no-LOCATER ``W_QK`` off by 139x, printed 6(C) short of its 1 % by
95 % or more, printed 6(D)/Sec. 7 excess 0.019 nats (> 0), the no-LOCATER run 0.020 nats from
``kappa2 = 0`` (> 0.01), printed Fig. 7 reversed by 7.1 SE, the no-LOCATER ``min_i rho_i`` 0.10-0.31
(< 0.5).
Other settings (seeds 0-2 each; ledger, Figs. 6-12): 3 layers, every claim holds; 6 layers (d = 32),
kappa2 > 0 improved the perplexity over kappa2 = 0 by 0.6-1.1 % (the 0.01-nat bound failed at one
seed); 2000 steps (lr 1e-3, batch 32), all hold but claim 6 at one seed (LOCATER's ``min_i rho_i``
0.39, through the unpenalised bias logits ``b_Q^T W_K x_s``; no LOCATER's 0.012-0.020); d = 128
(lr 1e-3), all hold but the stationary-scale match at two seeds (4.4-5.9 %: the ``kappa2 = 0`` run
is still 1/16-1/22 of the prediction); d = 128 with 3 and 6 layers (seed 0), the same, and with 6
layers ``kappa2 = 1`` worsened the perplexity by 1.5 % (bound failed).
"""

from __future__ import annotations

import functools
import math

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.figures import heatmaps, lines, panel, series
from verify.settings import Setting

#: Sec. 7: the scale weight of every LOCATER run.
KAPPA1 = 100.0
#: Claim 1: relative tolerance of the stationary scale at the largest kappa2, and how far above the
#: kappa2 = 0 run's residual scale (the optimiser's distance from stationarity) the prediction must lie.
SCALE_REL_TOL, FLOOR_FACTOR = 0.05, 20.0
#: Claim 2: kappa2's entropy effect as a fraction of kappa1's.
ENTROPY_FRACTION = 0.01
#: Claim 3: bound on kappa2's effect on the validation cross-entropy (nats).
CE_BOUND = 0.01
#: Claim 6: the smallest rho_i a LOCATER run may have (most of the signal propagates at every position).
RHO_FLOOR = 0.5
#: The controls' statistics expected of a run: no closed form gives a trained model's numbers, so these are
#: the medians over seeds 0-19 of the quick profile (ranges in the ledger), each far past its tolerance.
EXPECTED = {"6B": 4.0, "stationary": 630.0, "6C": 1.0, "6D": 0.044, "7": 8.1, "vanishing": 0.32}
#: The paper's first phase: 10^4 of 5 x 10^4 iterations.
PHASE_FRACTION = 0.2
WEIGHT_DECAY = 0.01


@functools.lru_cache(maxsize=4)
def _corpus(name: str, vocab: int):
    from verify.tasks.text_corpus import load_corpus

    return load_corpus(name, vocab or None)


def _paired_z(a, b) -> tuple[float, float]:
    """Mean of ``a - b`` over windows and its z (paired standard error)."""
    diff = np.asarray(a) - np.asarray(b)
    se = diff.std(ddof=1) / math.sqrt(diff.size)
    return float(diff.mean()), float(diff.mean() / se) if se > 0 else float("inf") * np.sign(diff.mean())


def _phase_contrast(steps, values, log=False) -> float:
    s, v = np.asarray(steps, float), np.asarray(values, float)
    if log:
        v = np.log(np.maximum(v, 1e-300))
    cut = PHASE_FRACTION * s[-1]
    k = int(np.searchsorted(s, cut, side="right")) - 1
    early, late = abs(v[k] - v[0]) / max(s[k], 1.0), abs(v[-1] - v[k]) / max(s[-1] - s[k], 1.0)
    return float(early / late) if late > 0 else float("inf")


def _stripe(rho, windows) -> float:
    """Spread of rho_i over positions in units of the largest binomial SE 0.5 / sqrt(windows)."""
    return float(np.std(rho) / (0.5 / math.sqrt(windows)))


def _runs(ctx, corpus, layers: int, kappa2s, seed: int) -> dict:
    import torch

    from verify.models.localization_lm import train_locater_lm

    kw = dict(d=ctx.setting("d"), layers=layers, T=ctx.setting("T"), batch=ctx.setting("batch"),
              steps=ctx.setting("steps"), lr=ctx.setting("lr"), weight_decay=WEIGHT_DECAY,
              record_every=max(1, ctx.setting("steps") // 30), eval_windows_max=ctx.setting("eval_windows") or None,
              device=ctx.device)
    configs = [("no LOCATER", 0.0, 0.0)] + [(f"kappa2={k:g}", ctx.setting("kappa1"), k) for k in kappa2s]
    out = {}
    for name, k1, k2 in ctx.iterate(configs, f"L={layers}"):
        # common random numbers: every run starts from the same weights and sees the same windows
        out[name] = train_locater_lm(corpus, np.random.default_rng(seed), torch.Generator().manual_seed(seed),
                                     kappa1=k1, kappa2=k2, **kw)
    return out


def _assess(runs: dict, kappa1: float, kappa2s) -> tuple[dict, dict, dict]:
    """The claims (name -> (value, threshold, holds)), the controls (name -> (discrepancy,
    tolerance, expected)) and the numbers of one layer count."""
    none = runs["no LOCATER"]["final"]
    loc = [runs[f"kappa2={k:g}"]["final"] for k in kappa2s]
    ref = loc[0]
    fro = np.array([f["frobenius_sq"] for f in loc])
    var8 = np.array([f["variance"] for f in loc])
    stationary = theory.get("localization.locater.stationary_scale")
    pred = np.array([float(stationary(trW_QK=f["trace"], kappa1=kappa1, kappa2=k)) if k > 0 else 0.0
                     for f, k in zip(loc, kappa2s)])
    rel = np.abs(fro - pred) / np.where(pred > 0, pred, np.nan)
    converged = bool(pred[-1] >= FLOOR_FACTOR * fro[0])
    ratios = np.diff(np.log(fro))
    var_ratios = np.diff(np.log(np.maximum(var8, 1e-300)))
    H = np.array([f["entropy_all"] for f in loc])
    kappa1_effect = abs(ref["entropy_all"] - none["entropy_all"])
    dH = (H - H[0]) / kappa1_effect
    dH_top, zH_top = _paired_z(loc[-1]["entropy_windows"], ref["entropy_windows"])
    CE = np.array([f["ce"] for f in loc])
    dCE = np.abs(CE - CE[0])
    cost = [_paired_z(f["ce_windows"], none["ce_windows"]) for f in loc]
    windows = none["windows"]
    stripes = [_stripe(f["rho"], windows) for f in loc]
    stripe_none = _stripe(none["rho"], windows)
    rho_min = [min(f["rho"]) for f in loc]
    claims = {
        "1. scale rises with kappa2: min log ratio of tr(W_QK^T W_QK) and of the eq.-8 variance over consecutive "
        "kappa2 (> 0)": (float(min(ratios.min(), var_ratios.min())), 0.0,
                         bool(ratios.min() > 0 and var_ratios.min() > 0)),
        f"1. stationary scale at the largest kappa2: relative error (<= {SCALE_REL_TOL}; prediction >= "
        f"{FLOOR_FACTOR:g} x the kappa2 = 0 run's scale)": (float(rel[-1]), SCALE_REL_TOL,
                                                           converged and bool(rel[-1] <= SCALE_REL_TOL)),
        f"2. entropy: max |H(kappa2) - H(0)| / |H(0) - H(no LOCATER)| (<= {ENTROPY_FRACTION})":
            (float(np.abs(dH).max()), ENTROPY_FRACTION, bool(np.abs(dH).max() <= ENTROPY_FRACTION)),
        f"3. perplexity: max |CE(kappa2) - CE(0)| in nats (<= {CE_BOUND})":
            (float(dCE.max()), CE_BOUND, bool(dCE.max() <= CE_BOUND)),
        "3. perplexity: min over kappa2 of CE(LOCATER) - CE(no LOCATER) in nats (> 0)":
            (float(min(d for d, _ in cost)), 0.0, bool(min(d for d, _ in cost) > 0)),
        "4. entropy: min over kappa2 of H(LOCATER) - H(no LOCATER) (> 0)":
            (float(min(H) - none["entropy_all"]), 0.0, bool(min(H) > none["entropy_all"])),
        "5. rho: max over kappa2 of stripe(LOCATER) - stripe(no LOCATER) (< 0)":
            (float(max(stripes) - stripe_none), 0.0, bool(max(stripes) < stripe_none)),
        f"6. rho: min over kappa2 and i of rho_i with LOCATER (>= {RHO_FLOOR})":
            (float(min(rho_min)), RHO_FLOOR, bool(min(rho_min) >= RHO_FLOOR)),
    }
    none_pred = float(stationary(trW_QK=none["trace"], kappa1=kappa1, kappa2=max(kappa2s)))
    e = EXPECTED
    controls = {
        "printed Fig. 6(B): the scale shrinks with kappa2 (max log ratio of consecutive kappa2 <= 0)":
            (float(ratios.max()), 0.0, e["6B"]),
        "1. stationary scale of the no-LOCATER run's W_QK (relative error)":
            (abs(none["frobenius_sq"] - none_pred) / abs(none_pred) if none_pred else float("inf"), SCALE_REL_TOL,
             e["stationary"]),
        f"printed Fig. 6(C): a stronger kappa2 raises the entropy by >= {ENTROPY_FRACTION:.0%} of kappa1's effect "
        "(1 - largest rise / that)": (float(1.0 - dH.max() / ENTROPY_FRACTION), 0.0, e["6C"]),
        "printed Fig. 6(D), Sec. 7: better perplexity with LOCATER (min CE(LOCATER) - CE(no LOCATER) <= 0)":
            (float(min(d for d, _ in cost)), 0.0, e["6D"]),
        f"3. the {CE_BOUND}-nat bound on the no-LOCATER run vs kappa2 = 0":
            (float(abs(CE[0] - none["ce"])), CE_BOUND, e["6D"]),
        "printed Fig. 7: stripes with LOCATER, uniform without (stripe(no LOCATER) - max stripe(LOCATER) <= 0)":
            (float(stripe_none - max(stripes)), 0.0, e["7"]),
        f"6. min_i rho_i >= {RHO_FLOOR} for the no-LOCATER run (RHO_FLOOR - min rho)":
            (float(RHO_FLOOR - min(none["rho"])), 0.0, e["vanishing"]),
    }
    numbers = {
        "kappa2": list(kappa2s),
        "scale": {"no LOCATER": none["frobenius_sq"], "LOCATER": fro.tolist(), "stationary": pred.tolist(),
                  "relative_error": [None if not np.isfinite(r) else float(r) for r in rel]},
        "trace": {"no LOCATER": none["trace"], "LOCATER": [f["trace"] for f in loc]},
        "eq8_variance": {"no LOCATER": none["variance"], "LOCATER": var8.tolist()},
        "entropy_all": {"no LOCATER": none["entropy_all"], "LOCATER": H.tolist()},
        "entropy_last": {"no LOCATER": none["entropy_last"], "LOCATER": [f["entropy_last"] for f in loc]},
        "entropy_largest_kappa2_minus_0": {"mean": dH_top, "paired_z": zH_top},
        "perplexity": {"no LOCATER": none["perplexity"], "LOCATER": [f["perplexity"] for f in loc]},
        "ce_LOCATER_minus_none": {"mean": [d for d, _ in cost], "paired_z": [z for _, z in cost]},
        "stripe": {"no LOCATER": stripe_none, "LOCATER": stripes},
        "rho_min": {"no LOCATER": min(none["rho"]), "LOCATER": rho_min},
        "rho": {"no LOCATER": [round(x, 4) for x in none["rho"]],
                "LOCATER largest kappa2": [round(x, 4) for x in loc[-1]["rho"]]},
        "windows": windows,
    }
    phase = {}
    for name, r in runs.items():
        h = r["history"]
        phase[name] = {"log_scale": _phase_contrast(h["step"], h["frobenius_sq"], log=True),
                       "entropy": _phase_contrast(h["step"], h["entropy_all"]),
                       "train_ce": _phase_contrast(h["step"], h["ce"])}
    numbers["phase_contrast"] = phase
    return claims, controls, numbers


def _figures(runs: dict, layers: int, stationary) -> dict:
    def curves(key):
        return [series(name, r["history"]["step"], r["history"][key], style="--" if name == "no LOCATER" else "-")
                for name, r in runs.items()]

    steps = runs["no LOCATER"]["history"]["step"]
    flat = [series(f"stationary scale, {name}", [steps[0], steps[-1]], [p, p], style=":")
            for name, p in stationary.items() if p > 0]

    top = list(runs)[-1]
    return {
        f"scale_L{layers}": lines(f"Eigenspectrum scale tr(W_QK^T W_QK), block 1 of {layers} (Fig. 6(B))", "step",
                                  "||W_QK||_F^2", curves("frobenius_sq") + flat, yscale="log"),
        f"entropy_L{layers}": lines(f"Attention entropy (mean over queries), block 1 of {layers} (Fig. 6(C))", "step",
                                    "nats", curves("entropy_all")),
        f"ce_L{layers}": lines(f"Training cross-entropy, {layers} layer(s) (Fig. 6(D))", "step", "nats",
                               curves("ce")),
        f"rho_L{layers}": heatmaps(f"rho_i over training (rows: position i, columns: records), block 1 of {layers} "
                                   "(Fig. 7)",
                                   [panel(f"LOCATER {top}", np.array(runs[top]["history"]["rho"]).T),
                                    panel("no LOCATER", np.array(runs["no LOCATER"]["history"]["rho"]).T)]),
    }


@check("localization.locater.torch_language_model",
       aliases=["localization.locater.torch_training", "localization.torch.locater"],
       covers=["localization.locater.stationary_scale", "localization.locater.regulariser"], method="torch",
       title="Post-LN transformer LM on real text with and without LOCATER (kappa1 = 100, kappa2 sweep): scale, "
             "entropy, perplexity, rho (Figs. 6-12)",
       refutes={
           "Bao et al. 2024, Fig. 6(B) ('with stronger kappa2, the eigenspectrum scale shrinks')":
               "With kappa1 = 100 the penalty holds W_QK on the regulariser's stationary points, whose scale "
               "kappa2 t (1 - t) / kappa1 (localization.locater.stationary_scale) is 0 at kappa2 = 0 and grows with "
               "kappa2: the scale rises with kappa2 in every run.",
           "Bao et al. 2024, Fig. 6(C) ('with stronger kappa2, the attention entropy increases')":
               "kappa2 moves the attention entropy by under 1 % of what kappa1 does, and mostly lowers it (W_QK = a P "
               "adds a positive self-similarity logit).",
           "Bao et al. 2024, Fig. 6(D) and Sec. 7 ('the model achieves better perplexity')":
               "With one layer kappa2 changes the perplexity by under 1 %, and LOCATER (kappa1 = 100) makes it worse "
               "than no regulariser, by a margin that grows with training: the attention it leaves is nearly uniform.",
           "Bao et al. 2024, Fig. 7 ('stripes with LOCATER, uniform without')":
               "Reversed: with LOCATER the logits vary by less than 1 across keys and rho_i = 1 at nearly every "
               "position; without it rho_i rises from near 0 at the first positions to 1 at the last.",
       },
       settings=[Setting("corpus", "choice", quick="pydoc", full="auto", choices=("pydoc", "wikitext2", "auto"),
                         doc="text: pydoc_data.topics, WikiText-2 (folder in $WIKITEXT2_DIR), or auto (WikiText-2 "
                             "when $WIKITEXT2_DIR is set)"),
                 Setting("vocab", "int", quick=500, full=0, low=0, high=10**6,
                         doc="vocabulary cap with <unk> (0: every training token)"),
                 Setting("d", "int", quick=32, full=128, low=2, high=4096, doc="embedding = attention = FFN width"),
                 Setting("L", "ints", quick=(1,), full=(1, 6), low=1, high=48, doc="layer counts (one sweep each)"),
                 Setting("T", "int", quick=32, full=64, low=2, high=4096, doc="tokens per sequence"),
                 Setting("batch", "int", quick=16, full=64, low=1, high=10**5, doc="sequences per step"),
                 Setting("steps", "int", quick=400, full=50_000, low=10, high=10**7, doc="Adam(W) steps per run"),
                 Setting("lr", "float", quick=3e-3, full=2.5e-5, low=1e-7, high=1.0, doc="Adam(W) learning rate"),
                 Setting("kappa1", "float", quick=KAPPA1, full=KAPPA1, low=1e-6, high=1e6,
                         doc="LOCATER weight of the scale term"),
                 Setting("kappa2", "floats", quick=(0.0, 0.1, 1.0), full=(0.0, 1e-3, 1e-2, 1e-1, 1.0), low=0.0,
                         high=1e6, doc="LOCATER weights of the mean term, ascending (the smallest is the reference)"),
                 Setting("eval_windows", "int", quick=0, full=0, low=0, high=10**7,
                         doc="validation windows evaluated (0: all)")])
def torch_language_model(ctx):
    from verify.models.linear_attention import cpu_threads

    kappa2s = tuple(ctx.setting("kappa2"))
    if len(kappa2s) < 2 or list(kappa2s) != sorted(set(kappa2s)):
        raise ValueError(f"kappa2: expected at least two distinct values in ascending order, got {kappa2s}")
    corpus = _corpus(ctx.setting("corpus"), ctx.setting("vocab"))
    kappa1 = ctx.setting("kappa1")
    claims, controls, details, figures = {}, {}, {}, {}
    with cpu_threads(1 if ctx.device == "cpu" else None):
        for layers in ctx.setting("L"):
            seed = int(ctx.rng.integers(2**31))
            runs = _runs(ctx, corpus, layers, kappa2s, seed)
            cl, co, numbers = _assess(runs, kappa1, kappa2s)
            tag = f"L={layers}: "
            claims.update({tag + k: v for k, v in cl.items()})
            controls.update({tag + k: v for k, v in co.items()})
            details[f"layers_{layers}"] = numbers
            figures.update(_figures(runs, layers, dict(zip(list(runs)[1:], numbers["scale"]["stationary"]))))
    failed = [k for k, (_, _, ok) in claims.items() if not ok]
    details.update({
        "claims": {k: {"value": v, "threshold": t, "holds": ok} for k, (v, t, ok) in claims.items()},
        "corpus": {"name": corpus.name, "source": corpus.source, "vocab": corpus.vocab_size, **corpus.stats},
        "protocol": {"d": ctx.setting("d"), "T": ctx.setting("T"), "batch": ctx.setting("batch"),
                     "steps": ctx.setting("steps"), "lr": ctx.setting("lr"), "weight_decay": WEIGHT_DECAY,
                     "kappa1": kappa1, "kappa2": list(kappa2s), "optimizer": "AdamW (Adam defaults)",
                     "model": "Post-LN, single head, sinusoidal positions, no dropout, lambda = sqrt(d)",
                     "objective": "mean next-token cross-entropy + kappa1 ||W_QK||_F^2 + kappa2 (tr W_QK - 1)^2, "
                                  "summed over blocks"},
    })
    return Outcome(
        measured={"failed claims": failed, "claims": len(claims)},
        predicted="every claim holds", discrepancy=float(len(failed)), tolerance=0.0,
        criterion=("number of failed claims (see the module docstring), per layer count: (1) the scale and the eq.-8 "
                   "variance of W_QK rise with kappa2, and at the largest kappa2 the scale equals kappa2 t (1 - t) / "
                   f"kappa1 within {SCALE_REL_TOL:.0%}; (2) kappa2 moves the attention entropy by < "
                   f"{ENTROPY_FRACTION:.0%} of kappa1's effect; (3) kappa2 moves the validation cross-entropy by < "
                   f"{CE_BOUND} nats, and every LOCATER run's is higher than without; (4) every LOCATER run's entropy "
                   "is higher; (5) its spread of rho_i over positions is lower; (6) its min_i rho_i >= "
                   f"{RHO_FLOOR}. Must be 0. The bounds are effect sizes (1 % of perplexity, 1 % of LOCATER's entropy "
                   "effect); over seeds 0-19 the measured values stay 4-6 times inside them"),
        controls=[Control(name, disc, tol, expected=exp) for name, (disc, tol, exp) in controls.items()],
        details=details, figures=figures,
    )
