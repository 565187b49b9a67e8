"""Several training runs per check, one per problem draw (Ahn, Cheng, Daneshmand, Sra 2023, §4.3, §5.1).

The paper trains each experiment 5 times, with 5 random rotations ``U`` of ``Sigma = U^T D U``
(and 5 initialisations and batch streams), and plots the mean. A training check of
``preconditioned_gd`` declares the setting :data:`RUNS` (quick 1, full 5) and wraps its body::

    @check(..., settings=[..., RUNS])
    def theorem3_sparse(ctx):
        return over_problem_draws(ctx, _theorem3_sparse_run)

:func:`over_problem_draws` runs the body once per draw and joins the outcomes: the check passes
only if every run passes (a verdict is a property of the mathematics, not of a lucky rotation),
and the report keeps each run's ``Sigma``, statistics, verdict and controls. Run 0 is the
check's own context (with one run, the body's outcome is returned unchanged, so the quick
profile costs what it did); run ``r >= 1`` gets an independent context of the same seed
(:func:`run_context`), so one seed still gives one report.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from verify.registry import Context, Outcome
from verify.settings import Setting

__all__ = ["RUNS", "run_context", "over_problem_draws"]

#: The setting of a training check: how many runs (problem draws), quick 1, full 5 (the paper's).
RUNS = Setting("runs", "int", quick=1, full=5, low=1, high=100,
               doc="training runs, each with its own rotation U of Sigma, initialisation and batches "
                   "(the paper trains 5); the check passes only if every run passes")


def run_context(ctx: Context, r: int) -> Context:
    """The context of run ``r``: a fresh copy of ``ctx`` for ``r = 0`` (the same random streams),
    else one with the independent seed sequence of ``(ctx.seed, check id, r)``; both carry the
    run's draw of ``Sigma`` (:func:`verify.models.preconditioned_gd_training.experiment_covariance`),
    taken first from the run's generator, as the check body would take it."""
    from verify.models.preconditioned_gd_training import experiment_covariance

    if r < 0:
        raise ValueError(f"r: expected a run index >= 0, got {r}")
    sub = dataclasses.replace(ctx) if r == 0 else Context(
        f"{ctx.check_id}#run{r}", profile=ctx.profile, seed=ctx.seed, device=ctx.device,
        progress=ctx.progress, settings=dict(ctx.settings))
    sub.problem_covariance = experiment_covariance(sub)
    return sub


def _ratio(out: Outcome) -> float:
    """The outcome's discrepancy over its tolerance (inf for a failed run with no finite ratio)."""
    d, t = float(out.discrepancy), float(out.tolerance)
    if not np.isfinite(d) or not np.isfinite(t) or t <= 0:
        return float("inf") if not (np.isfinite(d) and d <= 0) else 0.0
    return d / t


def over_problem_draws(ctx: Context, body: Callable[[Context], Outcome]) -> Outcome:
    """Run ``body`` once per problem draw (``ctx.setting("runs")``) and join the outcomes.

    One run: ``body(ctx)`` unchanged. Several: ``measured``/``predicted`` per run; the
    discrepancy is the largest of the runs' ``discrepancy / tolerance`` (tolerance 1); every run's
    controls are kept (named ``run r: ...``), so each must be rejected; the outcome passes only
    if every run passes. ``details`` holds per run its ``Sigma`` (the draw), eigenvalues, verdict,
    normalised discrepancy, controls and the run's own details; figures of run ``r >= 1`` are
    prefixed ``run<r>_``.
    """
    runs = int(ctx.setting("runs"))
    if runs < 1:
        raise ValueError(f"runs: expected at least 1 run, got {runs}")
    if runs == 1:
        return body(ctx)
    outs, per, controls, figures = {}, {}, [], {}
    for r in range(runs):
        sub = run_context(ctx, r)
        out = body(sub)
        ratio = _ratio(out)
        rejected = all(c.rejected for c in out.controls)
        ok = bool(out.passed and rejected and ratio <= 1.0)
        outs[r] = out
        Sigma = sub.problem_covariance
        per[f"run {r}"] = {"passed": ok, "discrepancy / tolerance": ratio, "controls rejected": rejected,
                           "Sigma": np.asarray(Sigma).tolist(),
                           "Sigma eigenvalues": np.linalg.eigvalsh(Sigma).tolist(),
                           "controls": [c.as_dict() for c in out.controls], "details": out.details}
        controls += [dataclasses.replace(c, name=f"run {r}: {c.name}") for c in out.controls]
        figures.update({(k if r == 0 else f"run{r}_{k}"): v for k, v in out.figures.items()})
    passed = [r for r in range(runs) if per[f"run {r}"]["passed"]]
    ratios = [per[f"run {r}"]["discrepancy / tolerance"] for r in range(runs)]
    worst = int(np.argmax(ratios))
    return Outcome(
        measured={f"run {r}": o.measured for r, o in outs.items()},
        predicted={f"run {r}": o.predicted for r, o in outs.items()},
        discrepancy=float(max(ratios)), tolerance=1.0,
        criterion=(f"every one of {runs} runs passes (each with its own rotation U of Sigma, "
                   f"initialisation and batches; the paper trains 5): the largest normalised "
                   f"discrepancy over the runs <= 1 and every run's controls rejected; "
                   f"{len(passed)} of {runs} passed (worst: run {worst}). Per run: {outs[0].criterion}"),
        controls=controls,
        passed=len(passed) == runs,
        details={"runs": runs, "passed runs": passed, "worst run": worst, "per run": per},
        figures=figures,
    )
