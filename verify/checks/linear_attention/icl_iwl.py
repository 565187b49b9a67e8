"""In-context and in-weight learning (Zhang, Singh, Latham, Saxe 2025, App. G, eq. 90, Fig. 14).

Contains
--------
``linear_attention.icl_iwl.torch_training``
    The real ATTN_M trained with a portion p of fixed task vectors: after its first drop it is the best
    in-context predictor for the mixture (``linear_attention.icl_iwl.mixture_matrix``), lower in-weight
    and training loss for larger p (Fig. 14's claim); at p = 0 it never learns in weight, at the largest
    p its vector blocks (eq. 90) later learn in weight
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.settings import Setting
from verify.stats import evaluate as _cf
from verify.stats import z_threshold

TASK_LOSS = "linear_attention.icl_iwl.task_loss"
MIXTURE = "linear_attention.icl_iwl.mixture_matrix"
LOSS = "linear_attention.merged.loss"
#: The plateau after the first drop: t in [WINDOW[0], WINDOW[1]] times the p = 0 run's half-drop time.
WINDOW = (2.0, 4.0)
#: Plateau levels of the in-context predictor vs the mixture minimiser (relative; SGD's excess loss
#: at these learning rates is below 1 %).
LEVEL_RTOL = 0.02
#: Loss evaluations on the test sets over a run.
EVALUATIONS = 50
QUICK = dict(D=3, N=15, H=4, portions=(0.0, 0.25, 0.5), w_init=1e-2, eta=0.1, batch=500, steps=2500, test=20000)
FULL = dict(D=4, N=31, H=8, portions=(0.0, 0.25, 0.5), w_init=1e-2, eta=0.1, batch=1000, steps=8000, test=50000)


def _runs(ctx, Lam, N: int, H: int, w_star, portions, tests, setting: dict, dtype) -> dict:
    """Train ATTN_M (every block) with each portion ``p`` of the task ``w_star``, side by side (the same start
    and input draws at every ``p``, drawn once); evaluate the squared errors on the test sets and the effective
    matrix and vector-block norms at :data:`EVALUATIONS` points."""
    import torch

    from verify.models.linear_attention import MergedLinearAttention, cpu_threads, train_online_sgd

    D = Lam.shape[0]
    models = []
    for _ in portions:                               # the same start at every p
        gen = ctx.torch_generator(ctx.device)
        models.append(MergedLinearAttention(D, H, N, dtype=dtype, device=ctx.device).init_(gen, setting["w_init"]))
    steps, per = setting["steps"], max(1, setting["steps"] // EVALUATIONS)
    runs = {p: {"t": [], "icl": [], "iwl": [], "M": [], "blocks": []} for p in portions}
    # one CPU thread, as in the training (the test sets are tiny matrices per sequence: at two threads on a
    # busy 2-core machine an evaluation took 40x longer)
    threads = 1 if torch.device(ctx.device).type == "cpu" else None

    def evaluate(done: int) -> None:
        for model, r in zip(models, runs.values()):
            with torch.no_grad(), cpu_threads(threads):
                for name, (X, y, gram) in tests.items():
                    r[name].append(((model.predict(X, gram=gram) - y) ** 2).to(torch.float64).cpu().numpy())
            r["t"].append(2.0 * setting["eta"] * done)
            r["M"].append(model.effective_matrix().detach().cpu().numpy().astype(np.float64))
            r["blocks"].append(model.zero_block_norms())

    # one run, evaluated at every per-th step and at the end (the same draws as one run per stretch and p)
    train_online_sgd(models, Lam, N, eta=setting["eta"], steps=steps, batch=setting["batch"], generator=gen,
                     device=ctx.device, log_every=per, w_star=w_star, fixed=list(portions), callback=evaluate)
    return {p: {k: np.asarray(v) for k, v in r.items()} for p, r in runs.items()}


def _z(a, b=None, expected=0.0):
    """z of the mean of per-sequence values ``a`` (minus ``b``, paired) against ``expected``."""
    d = a if b is None else a - b
    se = float(np.std(d, ddof=1) / np.sqrt(d.size))
    return (float(np.mean(d)) - expected) / se, se


@check("linear_attention.icl_iwl.torch_training", covers=[TASK_LOSS, MIXTURE, LOSS],
       method="torch", needs=("torch",),
       title="Fig. 14: ATTN_M trained with a portion p of fixed tasks reaches the best in-context predictor for "
             "the mixture after its first drop (lower in-weight loss for larger p), then learns in weight",
       settings=[Setting("spectrum", "spectrum", quick="white", full="white",
                         doc="eigenvalues of Lambda, scaled to trace 1, randomly rotated (Fig. 14: I / D)"),
                 *(Setting(k, kind, quick=QUICK[k], full=FULL[k], low=low, high=high, doc=doc)
                   for k, kind, low, high, doc in (
                       ("D", "int", 1, 16, "token dimension"),
                       ("N", "int", 2, 1000, "context length"),
                       ("H", "int", 1, 64, "heads"),
                       ("portions", "floats", 0.0, 1.0,
                        "portions p of the training sequences with the fixed task w* (the first must be 0)"),
                       ("w_init", "float", 1e-4, 0.1, "scale of the eq.-34 start"),
                       ("eta", "float", 1e-3, 1.0, "SGD learning rate (one step is t / tau = 2 eta)"),
                       ("batch", "int", 10, 10**6, "fresh sequences per SGD step"),
                       ("steps", "int", 100, 10**7, "SGD steps of each run"),
                       ("test", "int", 1000, 10**7, "sequences in each test set (in-context and in-weight)")))])
def torch_training(ctx):
    """App. G: a portion ``p`` of the training sequences share one fixed task ``w*`` (here drawn at random
    and scaled to ``||w*||^2 = D``, the mean of ``||w||^2``), the rest have ``w ~ N(0, I)``. The real
    :class:`~verify.models.linear_attention.MergedLinearAttention`, every block trainable (so eq. 90, not
    eq. M), is trained by online SGD from the eq.-34 start at each ``p`` on the same input draws; the
    in-context test loss is taken on sequences with ``w ~ N(0, I)``, the in-weight one on sequences with
    ``w = w*``, the same test sets throughout.

    Theory: a layer with its vector blocks at zero is the in-context predictor ``beta^T M x_q``; its loss
    on ``w*`` is ``linear_attention.icl_iwl.task_loss`` at its own ``M``, its training loss is minimised
    by ``M_p`` (``linear_attention.icl_iwl.mixture_matrix``), whose in-weight loss falls as ``p`` grows.
    Pass, with ``z`` the Bonferroni threshold at 5 % over every z-test below:

    1. on the plateau after the first drop (``t`` in :data:`WINDOW` times the ``p = 0`` run's half-drop
       time), at every ``p``: the measured in-context and in-weight test losses (averaged over the window)
       are those of the in-context predictor with the layer's own ``M_t`` (``|z| <= z``): nothing is
       learnt in weight yet, and what the layer does better on ``w*`` is done in context;
    2. that predictor's levels there (from ``M_t``, no sampling) are ``M_p``'s within
       :data:`LEVEL_RTOL`;
    3. Fig. 14's claim: on that plateau the in-weight test loss falls from each ``p`` to the next (paired
       z >= z), and the training loss is lower at the largest ``p`` than at ``p = 0`` by at least half the
       gap between ``M_p``'s and ``M*``'s levels (the in-context predictor's, which 1 shows the layer is;
       the sampled paired z is reported);
    4. at ``p = 0`` the in-weight test loss, averaged over the run from the window on, is the in-context
       predictor's (§7: only in-context learning develops; SGD noise moves the vector blocks a little, at
       random, so a single evaluation is not); at the largest ``p`` it ends below it (z <= -z): the vector
       blocks of eq. 90 have learnt ``w*`` in weight.

    Control: the levels of ``M*`` (eq. 9b, the fixed tasks ignored) against the plateau at the largest
    ``p`` (rejected: off by more than :data:`LEVEL_RTOL`).

    Seeds 0-19 (quick): all pass, worst 0.594 of the tolerance (the plateau levels within 1.2 % of ``M_p``'s),
    the in-weight loss falling with ``p`` at paired z >= 25 (seed 10), the largest ``p``'s final z -35 to -63, the
    control 6.8-7.3 times its tolerance. 1500 steps fail (4) at 18 of the 20 seeds (in weight not yet learnt at the
    end), and 10000 test sequences save no measurable time, so the quick sizes stay. What the runs show beyond
    the paper: the lower losses at larger ``p``
    right after the first drop are learnt in context (the layer is the in-context predictor at ``M_p``, its
    vector blocks back near zero after an early transient); in-weight learning proper comes later.
    """
    import torch

    from verify.models.linear_attention import sample_tokens
    from verify.tasks.in_context_regression import random_covariance

    D, N, H = (ctx.setting(k) for k in ("D", "N", "H"))
    setting = {k: ctx.setting(k) for k in ("w_init", "eta", "batch", "steps")}
    portions = tuple(float(p) for p in ctx.setting("portions"))
    if len(portions) < 2 or portions[0] != 0.0 or any(b <= a for a, b in zip(portions, portions[1:])):
        raise ValueError(f"portions: expected 0 followed by increasing portions, got {portions}")
    n_test = ctx.setting("test")
    eig = np.array(ctx.setting("spectrum").eigenvalues(D, trace=1.0))
    if len(eig) != D:
        raise ValueError(f"spectrum: {len(eig)} eigenvalues for D = {D}")
    Lam = random_covariance(ctx.rng, eig)
    g = ctx.rng.standard_normal(D)
    w_star = g * np.sqrt(D) / np.linalg.norm(g)
    dtype = torch.float32
    tgen = torch.Generator(device=ctx.device)
    tgen.manual_seed(int(ctx.rng.integers(2**62)))
    chol = torch.as_tensor(np.linalg.cholesky(Lam), dtype=dtype, device=ctx.device)
    tests = {}
    for name, fixed in (("icl", 0.0), ("iwl", 1.0)):
        tb = sample_tokens(None, N, n_test, generator=tgen, device=ctx.device, dtype=dtype, chol=chol,
                           w_star=w_star, fixed=fixed)
        tests[name] = (tb.X, tb.y_q, tb.X @ tb.X.transpose(1, 2))   # X X^T once: the layer evaluates these often
    runs = _runs(ctx, Lam, N, H, w_star, portions, tests, setting, dtype)

    # the in-context predictor of each evaluated M_t, and the mixture minimisers
    pred = {p: {"icl": np.asarray(_cf(LOSS, Lambda=Lam, N=N, M=r["M"]), float),
                "iwl": np.asarray(_cf(TASK_LOSS, Lambda=Lam, N=N, M=r["M"], w_star=w_star), float)}
            for p, r in runs.items()}
    M_p = {p: np.asarray(_cf(MIXTURE, Lambda=Lam, N=N, w_star=w_star, p=p), float) for p in portions}
    level = {p: {"icl": float(_cf(LOSS, Lambda=Lam, N=N, M=M)),
                 "iwl": float(_cf(TASK_LOSS, Lambda=Lam, N=N, M=M, w_star=w_star))} for p, M in M_p.items()}

    base = runs[0.0]
    L0, Lstar = float(np.trace(Lam)), level[0.0]["icl"]
    icl0 = base["icl"].mean(1)
    below = np.nonzero(icl0 < 0.5 * (L0 + Lstar))[0]
    if below.size == 0:
        raise ValueError(f"steps: the p = 0 run has not dropped by t = {base['t'][-1]:g}; train longer")
    t_half = float(base["t"][below[0]])
    win = (base["t"] >= WINDOW[0] * t_half) & (base["t"] <= WINDOW[1] * t_half)
    if win.sum() < 2 or base["t"][-1] < WINDOW[1] * t_half:
        raise ValueError(f"steps: the plateau window t in [{WINDOW[0] * t_half:g}, {WINDOW[1] * t_half:g}] needs "
                         f"a longer run (t ends at {base['t'][-1]:g})")
    after = base["t"] >= WINDOW[0] * t_half
    n_tests = 2 * len(portions) + (len(portions) - 1) + 2
    z_crit = z_threshold(n_tests)

    plateau, z1, rel2, z3 = {}, {}, {}, {}
    for p, r in runs.items():
        e = {k: r[k][win].mean(0) for k in ("icl", "iwl")}        # per-sequence window averages
        plateau[p] = e
        for k in ("icl", "iwl"):
            z1[f"p={p:g} {k}"] = _z(e[k], expected=float(pred[p][k][win].mean()))[0]
            rel2[f"p={p:g} {k}"] = abs(float(pred[p][k][win].mean()) / level[p][k] - 1.0)
    for a, b in zip(portions, portions[1:]):
        z3[f"in-weight p={a:g} - p={b:g}"] = _z(plateau[a]["iwl"], plateau[b]["iwl"])[0]
    pm = portions[-1]
    # training loss on the plateau: the in-context predictor's (what (1) shows the layer is), and sampled
    train_pred = {p: float(((1 - p) * pred[p]["icl"][win] + p * pred[p]["iwl"][win]).mean()) for p in portions}
    train_theory = {p: (1 - p) * level[p]["icl"] + p * level[p]["iwl"] for p in portions}
    gap = 1.0 - train_pred[pm] / train_pred[0.0]
    gap_theory = 1.0 - train_theory[pm] / train_theory[0.0]
    z_train = _z(plateau[0.0]["icl"], (1 - pm) * plateau[pm]["icl"] + pm * plateau[pm]["iwl"])[0]
    # (4) at p = 0 over the whole run after the drop (SGD moves the vector blocks a little, at random; the
    # average over the evaluations is the in-context predictor's), at the largest p at the end
    z4_base = _z(base["iwl"][after].mean(0), expected=float(pred[0.0]["iwl"][after].mean()))[0]
    z4_end = _z(runs[pm]["iwl"][-1], expected=float(pred[pm]["iwl"][-1]))[0]

    parts = {"(1) plateau = in-context predictor": max(abs(z) for z in z1.values()) / z_crit,
             "(2) predictor levels = M_p's": max(rel2.values()) / LEVEL_RTOL,
             "(3) in-weight loss falls with p": z_crit / min(z3.values()) if min(z3.values()) > 0 else np.inf,
             "(3) training loss lower at the largest p": 0.5 * gap_theory / gap if gap > 0 else np.inf,
             "(4) p = 0: nothing learnt in weight": abs(z4_base) / z_crit,
             "(4) largest p: learnt in weight at the end": -z_crit / z4_end if z4_end < 0 else np.inf}
    discrepancy = max(parts.values())
    star = {k: abs(float(pred[pm][k][win].mean()) / level[0.0][k] - 1.0) for k in ("icl", "iwl")}
    control = max(star.values()) / LEVEL_RTOL
    rows = []
    for p in portions:
        r = runs[p]
        rows.append({"p": p, "plateau in-context": float(plateau[p]["icl"].mean()),
                     "plateau in-weight": float(plateau[p]["iwl"].mean()),
                     "M_p in-context": level[p]["icl"], "M_p in-weight": level[p]["iwl"],
                     "final in-weight": float(r["iwl"][-1].mean()),
                     "final in-weight of the in-context predictor": float(pred[p]["iwl"][-1]),
                     "vector blocks (|a|, |u|) on the plateau": r["blocks"][win].mean(0).tolist(),
                     "vector blocks (|a|, |u|) at the end": r["blocks"][-1].tolist(),
                     "largest |a| (t)": [float(r["blocks"][:, 0].max()), float(r["t"][r["blocks"][:, 0].argmax()])]})
    t = base["t"]
    series = []
    for p in portions:
        series += [{"label": f"p={p:g} in-weight test", "x": t.tolist(), "y": runs[p]["iwl"].mean(1).tolist(),
                    "group": f"p={p:g}"},
                   {"label": f"p={p:g} in-context test", "x": t.tolist(), "y": runs[p]["icl"].mean(1).tolist(),
                    "style": ":", "group": f"p={p:g}"},
                   {"label": f"p={p:g} M_p in-weight level", "x": [float(t[win][0]), float(t[win][-1])],
                    "y": [level[p]["iwl"]] * 2, "style": "--", "group": f"p={p:g}"}]
    return Outcome(
        measured={"plateau in-weight loss": {f"p={p:g}": float(plateau[p]["iwl"].mean()) for p in portions},
                  "final in-weight z vs the in-context predictor (largest p)": z4_end},
        predicted={"M_p in-weight level": {f"p={p:g}": level[p]["iwl"] for p in portions}},
        discrepancy=float(discrepancy),
        tolerance=1.0,
        criterion=(f"worst of: (1) |z| of the plateau test losses (t in [{WINDOW[0]:g}, {WINDOW[1]:g}] x the "
                   "p = 0 half-drop time) against the in-context predictor of the layer's own M_t, over z; "
                   f"(2) relative gap of that predictor's plateau levels to M_p's, over {LEVEL_RTOL:g}; "
                   "(3) z over the smallest paired z of the plateau in-weight loss falling from each p to the next, "
                   "and half the theory's relative training-loss gap (M_p vs M*) over the in-context predictor's "
                   "gap between the largest p and p = 0; (4) |z| of the p = 0 in-weight loss, averaged over the "
                   "run after the window starts, against the in-context predictor, over z, and z over -z of the "
                   "largest p's final one; "
                   f"z = {z_crit:.2f} (Bonferroni, 5 % over {n_tests} tests); pass <= 1"),
        controls=[Control(f"levels of M* (eq. 9b, the fixed tasks ignored) against the plateau at p={pm:g}: "
                          f"relative gap over {LEVEL_RTOL:g}", float(control), 1.0,
                          expected=max(abs(level[pm][k] / level[0.0][k] - 1.0) for k in ("icl", "iwl")) / LEVEL_RTOL)],
        details={"D": D, "N": N, "H": H, "portions": list(portions), "w_star": w_star.tolist(),
                 "eigenvalues": eig.tolist(), **setting, "test": n_test, "dtype": "float32",
                 "half-drop time (p = 0)": t_half, "window": [float(t[win][0]), float(t[win][-1])],
                 "z threshold": z_crit, "(1) z": z1, "(2) relative": rel2, "(3) z": z3,
                 "parts (pass <= 1)": parts, "(3) training-loss gap (in-context predictor, theory)": [gap, gap_theory],
                 "(3) sampled training loss, paired z (p = 0 minus the largest p)": z_train,
                 "(4) z at p = 0 (after the drop)": z4_base,
                 "M* levels against the largest p's plateau (relative)": star, "runs": rows},
        figures={"loss": {"kind": "lines", "title": f"ATTN_M D={D}, N={N}, H={H}: fixed-task portions "
                          f"{', '.join(f'{p:g}' for p in portions)} (Fig. 14)", "xlabel": "t/τ",
                          "ylabel": "test loss", "xscale": "log", "series": series}},
    )
