"""Sweeps: one check at every point of a grid of its settings, and the validity map they give.

``python -m verify sweep ID --grid NAME=V1,V2,... [--grid NAME2=...] [--seeds 0-4] --report DIR``
runs the check at every grid point and seed (one task each, so ``--workers``/``--scheduler``
apply) and writes, beside the usual report,

* ``sweep.csv`` and ``sweep.json``: one row per point and seed with the settings, the seed, the
  discrepancy, the tolerance, their ratio (1 is the pass boundary), passed and seconds;
* ``figures/sweep-validity.png``: the validity map, discrepancy / tolerance over the grid: the
  ratio against the first grid setting, one line per value of the second (the worst seed, and the
  pass rate over seeds in the legend where there are several).

A grid value of a list setting (``ints``, ``floats``) is a one-element list: ``--grid d=2,8,32``
runs the check at d = 2, then d = 8, then d = 32.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math

__all__ = ["parse_grid", "grid_points", "rows", "write_sweep", "validity_figure", "SWEEP_FILES"]

from .report import SWEEP_FILES  # the files a sweep adds to its report folder

FIGURE = "sweep-validity"


def parse_grid(text: str) -> tuple[str, list[str]]:
    """``NAME=V1,V2,...`` -> (NAME, [V1, V2, ...]); ``ValueError`` naming ``--grid`` otherwise.
    A value may itself be a spectrum with commas when given in brackets: ``spectrum=[1,0.5],white``."""
    name, sep, values = str(text).partition("=")
    if not sep or not name.strip() or not values.strip():
        raise ValueError(f"--grid: expected NAME=V1,V2,..., got {text!r}")
    items, depth, cur = [], 0, ""
    for ch in values:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    items = [v.strip().strip("[]") for v in items]
    if any(not v for v in items):
        raise ValueError(f"--grid: empty value in {text!r}")
    return name.strip(), items


def grid_points(chk, grids: list[tuple[str, list[str]]], fixed: dict | None = None) -> list[dict]:
    """Every grid point as a settings dict (the last grid varies fastest), validated against the
    check's declared settings: ``ValueError`` naming a setting it does not have or a bad value."""
    declared = {s.name: s for s in chk.settings}
    names = [n for n, _ in grids]
    if len(set(names)) != len(names):
        raise ValueError(f"--grid: {names} names a setting twice")
    for n in names:
        if n not in declared:
            raise ValueError(f"--grid: {chk.id} has no setting {n!r} (its settings: "
                             f"{', '.join(declared) or 'none'}; see python -m verify settings {chk.id})")
        if fixed and n in fixed:
            raise ValueError(f"--grid: {n} is also given with --set")
    points = []
    for combo in itertools.product(*(vals for _, vals in grids)):
        point = dict(fixed or {})
        for n, v in zip(names, combo):
            declared[n].validate(v)  # one line naming the setting when a value is bad
            point[n] = v
        points.append(point)
    return points


def rows(results, grid_names: list[str]) -> list[dict]:
    """One row per result: the grid settings, seed, discrepancy, tolerance, ratio, passed, seconds."""
    out = []
    for r in results:
        ratio = r.discrepancy / r.tolerance if r.tolerance and math.isfinite(r.tolerance) else float("nan")
        row = {n: _value(r.settings.get(n)) for n in grid_names}
        row.update(seed=r.seed, discrepancy=r.discrepancy, tolerance=r.tolerance, ratio=ratio,
                   passed=bool(r.passed), seconds=round(float(r.seconds), 3), error=r.error or "")
        out.append(row)
    return out


def _value(v):
    return v[0] if isinstance(v, list) and len(v) == 1 else v


def _finite(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def write_sweep(folder, table: list[dict], *, check_id: str, grid_names: list[str]) -> None:
    """``sweep.csv`` and ``sweep.json`` into ``folder``; non-finite numbers are empty (CSV) or
    null (JSON)."""
    from pathlib import Path

    folder = Path(folder)
    cols = [*grid_names, "seed", "discrepancy", "tolerance", "ratio", "passed", "seconds", "error"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for row in table:
        w.writerow({k: ("" if isinstance(row[k], float) and not math.isfinite(row[k]) else
                        json.dumps(row[k]) if isinstance(row[k], list) else row[k]) for k in cols})
    (folder / "sweep.csv").write_text(buf.getvalue(), encoding="utf-8")
    doc = {"check": check_id, "grid": grid_names, "columns": cols,
           "rows": [{k: (_finite(v) if isinstance(v, float) else v) for k, v in row.items()} for row in table]}
    (folder / "sweep.json").write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")


def validity_figure(table: list[dict], *, check_id: str, grid_names: list[str]) -> dict:
    """The validity map as a figure spec (:mod:`verify.figures`): the worst ratio over seeds
    against the first grid setting, one line per value of the second; the pass boundary at 1."""
    from .figures import lines, series

    first, second = grid_names[0], (grid_names[1] if len(grid_names) > 1 else None)
    xs = _ordered(row[first] for row in table)
    numeric = all(isinstance(x, (int, float)) for x in xs)
    groups = _ordered(row[second] for row in table) if second else [None]
    curves = []
    for g in groups:
        y, rates = [], []
        for x in xs:
            here = [r for r in table if r[first] == x and (second is None or r[second] == g)]
            ratios = [r["ratio"] for r in here if math.isfinite(r["ratio"])]
            y.append(max(ratios) if ratios else float("nan"))
            rates.append(f"{sum(r['passed'] for r in here)}/{len(here)}")
        seeds = len({r["seed"] for r in table})
        label = (f"{second} = {g}" if second else "worst over seeds") + (
            f" (passed {', '.join(rates)})" if seeds > 1 else "")
        curves.append(series(label, xs if numeric else list(range(len(xs))), y, style="-"))
    curves.append(series("pass boundary (ratio = 1)", [xs[0], xs[-1]] if numeric else [0, len(xs) - 1],
                         [1.0, 1.0], style=":", color="k"))
    log = numeric and min(xs) > 0 and max(xs) / min(xs) >= 20
    xlabel = first if numeric else f"{first}: " + ", ".join(map(str, xs))
    return lines(f"Validity map of {check_id}: discrepancy / tolerance (<= 1 passes)", xlabel,
                 "discrepancy / tolerance", curves, xscale="log" if log else "linear", yscale="log")


def _ordered(values) -> list:
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    try:
        return sorted(seen)
    except TypeError:
        return seen
