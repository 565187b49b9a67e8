"""Symbolic and high-precision checks of every closed form of a topic, as a factory.

:func:`register_topic_checks` registers, for the records whose id starts with ``topic``:

* ``<topic>.symbolic_printed_forms``: the derived expression equals the paper's printed one
  for every record without an erratum (sympy); every erratum record's printed form differs
  symbolically *and* numerically (the negative controls); every ``stable`` rewrite equals
  the derivation.
* ``<topic>.high_precision``: the emitted numpy function agrees with the emitted mpmath
  function at 50 digits at random parameter points, relative to the larger of the value and
  the record's typical output size (so an exact zero is judged on the scale of the record,
  not on round-off divided by round-off); the same comparison with one parameter nudged by
  1e-6 relative is rejected (negative control).

:func:`sample_params` draws a random valid parameter point for any record (by parameter kind and
the parameter's declared sampling range), resampling until the record's domain accepts it.
"""

from __future__ import annotations

from typing import Callable

import mpmath
import numpy as np

import theory
from theory.params import SAMPLE_RANGES

from .registry import Control, Outcome, check
from .settings import Setting
from .stats import rel_err, rel_max

__all__ = ["register_topic_checks", "sample_params", "mp_to_float", "output_scale"]

#: Dimension of the random covariance / matrix parameters.
DIM = 3
#: Random points per record that set its output scale in the high-precision check.
SCALE_POINTS = 16


def _records(topic: str):
    return [r for r in theory.records() if r.id.startswith(topic + ".")]


def sample_params(r, rng, attempts: int = 200) -> dict:
    """A random valid parameter point for record ``r`` (resampled until it is in the domain)."""
    for _ in range(attempts):
        values = _draw(r, rng)
        try:
            r.validate(values)
            return values
        except ValueError:
            continue
    raise ValueError(f"id: no valid random parameters found for {r.id}")


def _draw(r, rng) -> dict:
    """One random point: matrices and lists by kind (dimension :data:`DIM`), scalars and indices
    from the parameter's own :attr:`~theory.Param.sample` range, else its kind's
    (:data:`theory.params.SAMPLE_RANGES`)."""
    D = DIM
    out = {}
    for p in r.params:
        n = p.name
        if p.kind == "covariance":
            q, _ = np.linalg.qr(rng.standard_normal((D, D)))
            out[n] = (q * np.exp(rng.uniform(np.log(0.1), np.log(10), D))) @ q.T
        elif p.kind == "matrix":
            out[n] = rng.standard_normal((D, D))
        elif p.kind == "subset":
            out[n] = sorted(int(d) for d in rng.choice(np.arange(1, D + 1), size=int(rng.integers(0, D + 1)),
                                                        replace=False))
        elif p.kind == "vector":
            out[n] = rng.standard_normal(D).tolist()
        elif p.kind == "steps":
            out[n] = rng.uniform(-0.5, 2.0, size=int(rng.integers(1, p.high + 1))).tolist()
        elif p.kind == "index":
            lo, hi = p.sample[:2] if p.sample is not None else SAMPLE_RANGES["index"]
            hi = D if hi == "D" else hi
            lo, hi = max(lo, p.low), min(hi, p.high) if p.high is not None else hi
            out[n] = int(rng.integers(lo, hi + 1))
        else:
            lo, hi, *scale = p.sample if p.sample is not None else SAMPLE_RANGES[p.kind]
            out[n] = float(np.exp(rng.uniform(np.log(lo), np.log(hi))) if scale else rng.uniform(lo, hi))
    return out


def mp_to_float(v):
    """mpmath scalar / matrix / list -> float or float64 array."""
    if isinstance(v, mpmath.matrix):
        return np.array(v.tolist(), dtype=float)
    if isinstance(v, list):
        return np.array([float(x) for x in v])
    return float(v)


def output_scale(r, rng, points: int | None = None) -> float:
    """The typical size of record ``r``'s output at random parameters: the median, over
    ``points`` random valid points, of the largest |entry| of its numpy value, zeros left out
    (a record that vanishes at some points, such as a gradient at a fixed point, gets the
    size it has elsewhere). 0.0 when every value is zero."""
    sizes = []
    for _ in range(points or SCALE_POINTS):
        value = np.asarray(r(**sample_params(r, rng)), dtype=float)
        size = float(np.max(np.abs(value))) if value.size else 0.0
        if size > 0:
            sizes.append(size)
    return float(np.median(sizes)) if sizes else 0.0


def register_topic_checks(topic: str, *, control_id: str, control_param: str,
                          tolerance: float = 1e-11, tolerance_reason: str = "") -> tuple[Callable, Callable]:
    """Register ``<topic>.symbolic_printed_forms`` and ``<topic>.high_precision``.

    ``control_id`` / ``control_param``: the record and the parameter nudged by 1e-6 relative
    in the high-precision negative control.
    """
    ids = [i for i in theory.ids() if i.startswith(topic + ".")]

    @check(f"{topic}.symbolic_printed_forms", method="symbolic", covers=ids,
           title="Derived closed forms equal the paper's printed forms (errata differ)")
    def symbolic_printed_forms(ctx):
        mismatched, agreed, controls = [], [], []
        for r in _records(topic):
            if r.printed is None:
                continue
            same = r.forms_equal("derived", "printed")
            if r.erratum:
                # negative control: the printed form of an erratum must differ, symbolically and in value
                values = dict(r.example) if r.example else sample_params(r, ctx.rng)
                gap = rel_max(r(**values, printed=True), r(**values))
                # expected: the printed form's gap from the derived one (closed forms, no sampling)
                controls.append(Control(f"{r.id}: printed form (erratum) differs", 0.0 if same else gap, 1e-6,
                                        expected=gap))
            elif same:
                agreed.append(r.id)
            else:
                mismatched.append(r.id)
        stable_bad = [r.id for r in _records(topic) if r.stable is not None and not r.forms_equal("derived", "stable")]
        if not controls:  # no erratum in this topic: a deliberately wrong form must be told apart
            r = theory.get(control_id)
            wrong = 2 * r.expr
            stat = 0.0 if r.equal(r.expr, wrong) else 1.0
            # an exact symbolic comparison (no sampling): the statistic is its own expected value
            controls.append(Control(f"{control_id}: twice the derived form", stat, 0.5, expected=stat))
        return Outcome(
            measured={"agree": len(agreed), "mismatch": mismatched, "stable_rewrite_mismatch": stable_bad},
            predicted={"mismatch": [], "stable_rewrite_mismatch": []},
            discrepancy=float(len(mismatched) + len(stable_bad)), tolerance=0.0,
            criterion="sympy proves derived == printed for every record without an erratum, and "
                      "derived == the stable rewrite used for numerics; an erratum's printed form must "
                      "differ (relative gap > 1e-6 at a random point). Each proof is kept with the "
                      "derivations in theory's cache, keyed by the source that decides it "
                      "(ATTENTION_THEORY_CACHE=off proves every one again)",
            controls=controls, details={"agreeing_records": agreed},
        )

    @check(f"{topic}.high_precision", method="high_precision", covers=ids,
           title="numpy functions agree with mpmath at 50 digits at random parameters",
           settings=[Setting("points", "int", quick=3, full=20, low=1, high=10**4,
                             doc="random parameter points per record")])
    def high_precision(ctx):
        points = ctx.setting("points")
        worst, per_id, scales = 0.0, {}, {}
        for r in _records(topic):
            scales[r.id] = scale = output_scale(r, ctx.rng)
            errs = []
            for _ in range(points):
                vals = sample_params(r, ctx.rng)
                with mpmath.workdps(50):
                    ref = mp_to_float(r("mpmath", **vals))
                errs.append(rel_err(r(**vals), ref, scale))
            per_id[r.id] = max(errs)
            worst = max(worst, per_id[r.id])
        # negative control: the same comparison with one parameter nudged by 1e-6 relative
        r = theory.get(control_id)
        vals = sample_params(r, ctx.rng)
        with mpmath.workdps(50):
            ref = mp_to_float(r("mpmath", **vals))
        v = vals[control_param]
        nudged = dict(vals, **{control_param: (np.asarray(v) * (1 + 1e-6)).tolist() if isinstance(v, list)
                               else v * (1 + 1e-6)})
        # expected: the nudged closed form's gap from the unnudged one, both in float64
        ctrl = [Control(f"{control_id} with {control_param} scaled by 1 + 1e-6",
                        rel_err(r(**nudged), ref, scales[control_id]), tolerance,
                        expected=rel_err(r(**nudged), r(**vals), scales[control_id]))]
        return Outcome(
            measured=worst, predicted=0.0, discrepancy=worst, tolerance=tolerance,
            criterion=f"max over {points} random points per record of |numpy - mpmath(50 digits)| / "
                      "max(|mpmath|, s), s the record's typical output size (median of its nonzero "
                      f"|value| over {SCALE_POINTS} random points: an exact zero is compared on that "
                      "scale, not relative to itself); "
                      + (tolerance_reason or f"{tolerance:g} allows float64 round-off amplified by the "
                         "conditioning of the inverses (eigenvalues span 0.1..10)"),
            controls=ctrl, details={"max_rel_error_per_id": per_id, "output_scale_per_id": scales},
        )

    return symbolic_printed_forms, high_precision
