"""The verification report: ``results.json``, ``report.md`` and figures.

:func:`write_report` writes, into one folder,

``results.json``
    ``{"metadata": {...}, "summary": {...}, "results": [...]}``: library versions,
    platform, device, seed, profile and date; one record per check
    (:meth:`verify.check.CheckResult.as_json` plus ``status``: passed, failed or skipped).
``report.md``
    The metadata and summary; one table per topic (the first two components of the check
    id, e.g. ``linear_attention.merged``); each check's criterion, negative controls and
    details; the errata of the registered closed forms with the checks that cover them.
``figures/<check-id>-<name>.png``
    One PNG per figure spec returned by a check (when matplotlib is installed).

Figure specs (``Outcome.figures``: name -> spec)
------------------------------------------------
Lines, e.g. theory curves against simulation::

    {"kind": "lines", "title": str, "xlabel": str, "ylabel": str,
     "xscale": "linear" | "log" (optional), "yscale": ... (optional),
     "series": [{"label": str, "x": list, "y": list,
                 "style": "-" | "--" | ":" | "o" (optional, default "-"),
                 "color": a matplotlib colour (optional),
                 "yerr": list (optional error bars)}]}

Heat maps, e.g. a measured matrix next to the predicted one (one shared colour scale)::

    {"kind": "heatmaps", "title": str,
     "panels": [{"label": str, "matrix": 2-d list}]}
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import sys
import textwrap
from pathlib import Path
from typing import Iterable

__all__ = ["write_report", "metadata", "source_commit", "render_figure", "group_of", "paper_heading",
           "status_of"]

_PACKAGES = ("numpy", "scipy", "sympy", "mpmath", "torch", "matplotlib")


# -- metadata -----------------------------------------------------------------------
def metadata(*, profile: str, seed: int, device: str) -> dict:
    """Versions, platform and run settings recorded with every report."""
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        if importlib.util.find_spec(name) is None:
            continue
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            mod = sys.modules.get(name)
            versions[name] = getattr(mod, "__version__", "unknown")
    try:
        toolkit = importlib.metadata.version("attention-dynamics-theory")
    except importlib.metadata.PackageNotFoundError:
        toolkit = None
    meta = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "profile": profile,
        "seed": seed,
        "device": device,
        "toolkit": toolkit,
        "versions": versions,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "commit": source_commit(),
    }
    torch = sys.modules.get("torch")
    if device == "cuda" and torch is not None:
        try:
            meta["cuda_device"] = torch.cuda.get_device_name(0)
            meta["cuda_version"] = torch.version.cuda
        except (RuntimeError, AssertionError):  # no usable CUDA device
            pass
    return meta


def source_commit() -> str | None:
    """The git commit of the toolkit's source tree (``+dirty`` when tracked files differ), or
    None outside a git checkout."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


# -- helpers ------------------------------------------------------------------------
def status_of(res) -> str:
    """``passed``, ``failed`` or ``skipped`` (skipped: ``details["skipped"]`` is set)."""
    if isinstance(res.details, dict) and res.details.get("skipped"):
        return "skipped"
    return "passed" if res.passed else "failed"


def paper_heading(check_id: str) -> str:
    """The report section of a check: its paper (one table per paper), else its topic."""
    try:
        from theory.papers import paper_of

        p = paper_of(check_id)
    except (ImportError, ValueError):
        return group_of(check_id)
    return f"{p.cite}: {p.title}"


def group_of(check_id: str) -> str:
    """The topic of a check: the first two components of its id."""
    return ".".join(check_id.split(".")[:2])


def _clean(x):
    """Strict JSON: non-finite floats and unknown objects become strings."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else str(x)
    return str(x)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _flat(x) -> tuple[list, tuple] | None:
    """Numbers of a (nested) list and its shape, or None if ``x`` is not numeric."""
    try:
        import numpy as np

        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        return None
    return arr.ravel().tolist(), arr.shape


def _fmt(v) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (int, float)) or hasattr(v, "__float__"):
        try:
            f = float(v)
        except (TypeError, ValueError):
            return str(v)
        if math.isnan(f):
            return "–"
        if isinstance(v, int) and abs(v) < 10**6:
            return str(v)
        return f"{f:.4g}"
    return str(v)


def short(x, limit: int = 48) -> str:
    """A short form of a measured or predicted value for a table cell."""
    if x is None:
        return "–"
    if isinstance(x, str):
        return x if len(x) <= limit else x[: limit - 1] + "…"
    if isinstance(x, dict):
        s = ", ".join(f"{k}={short(v, 16)}" for k, v in x.items())
        return short(s, limit)
    if isinstance(x, (list, tuple)) or hasattr(x, "shape"):
        flat = _flat(x)
        if flat is None:
            return short(str(x), limit)
        vals, shape = flat
        if not vals:
            return "[]"
        if len(vals) <= 4:
            s = "[" + ", ".join(_fmt(v) for v in vals) + "]"
            if len(s) <= limit:
                return s
        dims = "×".join(str(n) for n in shape)
        big = max(vals, key=lambda v: abs(v) if math.isfinite(v) else math.inf)
        return f"{dims} array, max abs {_fmt(abs(big))}"
    return _fmt(x)


def _cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_") or "figure"


def _anchor(check_id: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "", check_id.lower().replace(" ", "-"))


# -- report -------------------------------------------------------------------------
def write_report(results: Iterable, out_dir, *, profile: str, seed: int, device: str,
                 seconds: float) -> dict[str, Path]:
    """Write ``results.json``, ``report.md`` and figures into ``out_dir``.

    Parameters
    ----------
    results : iterable of verify.check.CheckResult
        The checks of one run, in run order.
    out_dir : str or Path
        Folder to write (created if missing).
    profile, seed, device : str, int, str
        The run's settings, recorded in the metadata.
    seconds : float
        Wall time of the whole run.

    Returns
    -------
    dict
        ``{"results.json": path, "report.md": path, "figures": [paths]}``.
    """
    results = list(results)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = metadata(profile=profile, seed=seed, device=device)
    statuses = [status_of(r) for r in results]
    summary = {"passed": statuses.count("passed"), "failed": statuses.count("failed"),
               "skipped": statuses.count("skipped"), "seconds": round(float(seconds), 3)}

    records = []
    for r, st in zip(results, statuses):
        rec = r.as_json()
        rec["status"] = st
        records.append(rec)
    doc = _clean({"metadata": meta, "summary": summary, "results": records})
    json_path = out / "results.json"
    _write_atomic(json_path, json.dumps(doc, indent=2, allow_nan=False) + "\n")

    figures, figure_notes = _render_all(results, out)
    md_path = out / "report.md"
    _write_atomic(md_path, _markdown(results, statuses, meta, summary, figures, figure_notes))
    return {"results.json": json_path, "report.md": md_path,
            "figures": [p for ps in figures.values() for _, p in ps]}


def _summary_text(summary: dict) -> str:
    s = f"{summary['passed']} passed, {summary['failed']} failed"
    if summary["skipped"]:
        s += f", {summary['skipped']} skipped"
    return f"{s} in {summary['seconds']:.1f} s"


def _markdown(results, statuses, meta, summary, figures, figure_notes) -> str:
    L: list[str] = []
    add = L.append
    add("# Verification report")
    add("")
    add(f"**{_summary_text(summary)}** (profile `{meta['profile']}`, seed {meta['seed']}, "
        f"device `{meta['device']}`)")
    add("")
    add("| | |")
    add("|---|---|")
    add(f"| date (UTC) | {meta['date']} |")
    for key in ("profile", "seed", "device", "toolkit", "cuda_device"):
        if meta.get(key) is not None:
            add(f"| {key} | {_cell(meta[key])} |")
    add("| versions | " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + " |")
    add(f"| platform | {_cell(meta['platform'])} ({meta['cpu_count']} CPUs) |")
    add("")
    add("A check passes when its discrepancy is within tolerance **and** every negative "
        "control (a wrong form the same test must reject) is rejected.")
    add("")

    if not results:
        add("No checks were run.")
        add("")

    groups: dict[str, list] = {}
    try:
        from theory.papers import PAPERS

        order = {t: k for k, t in enumerate(PAPERS)}
    except ImportError:
        order = {}
    for r, st in sorted(zip(results, statuses),
                        key=lambda x: (order.get(x[0].id.split(".")[0], len(order)), x[0].id)):
        groups.setdefault(paper_heading(r.id), []).append((r, st))

    for group, items in groups.items():
        n_pass = sum(st == "passed" for _, st in items)
        add(f"## {group}")
        add("")
        add(f"{n_pass} of {len(items)} passed.")
        add("")
        add("| check | covers | method | measured vs predicted | discrepancy | tolerance "
            "| pass | seconds |")
        add("|---|---|---|---|---:|---:|:---:|---:|")
        for r, st in items:
            covers = "<br>".join(f"`{c}`" for c in r.covers) or "–"
            mvp = (f"skipped: {r.details['skipped']}" if st == "skipped"
                   else f"{short(r.measured)} vs {short(r.predicted)}")
            mark = {"passed": "pass", "failed": "**FAIL**", "skipped": "skipped"}[st]
            add(f"| [`{r.id}`](#{_anchor(r.id)}) | {covers} | {r.method} | {_cell(mvp)} | "
                f"{_fmt(r.discrepancy)} | {_fmt(r.tolerance)} | {mark} | {r.seconds:.1f} |")
        add("")

    if results:
        add("## Criteria, negative controls and details")
        add("")
        for r, st in zip(results, statuses):
            L.extend(_check_section(r, st, figures.get(r.id, []), figure_notes.get(r.id, [])))

    L.extend(_errata_section(results, statuses))
    return "\n".join(L).rstrip() + "\n"


def _check_section(r, st, figs, notes) -> list[str]:
    L = [f'<a id="{_anchor(r.id)}"></a>', "", f"### {r.id}", ""]
    if r.title:
        L += [r.title, ""]
    L.append(f"- result: **{st}**; method `{r.method}`; {r.seconds:.2f} s; seed {r.seed}, "
             f"profile `{r.profile}`")
    if r.covers:
        L.append("- covers: " + ", ".join(f"`{c}`" for c in r.covers))
    if st == "skipped":
        L += [f"- skipped: {r.details['skipped']}", ""]
        return L
    L.append(f"- criterion: {r.criterion}")
    L.append(f"- discrepancy {_fmt(r.discrepancy)} vs tolerance {_fmt(r.tolerance)}")
    if r.error:
        L.append(f"- error: `{r.error}`")
    L.append(f"- measured: {short(r.measured, 120)}")
    L.append(f"- predicted: {short(r.predicted, 120)}")
    if r.controls:
        L.append("- negative controls:")
        for c in r.controls:
            verdict = "rejected" if c.get("rejected") else "**NOT rejected**"
            L.append(f"  - {c.get('name')}: discrepancy {_fmt(c.get('discrepancy'))} vs "
                     f"tolerance {_fmt(c.get('tolerance'))}: {verdict}")
    else:
        L.append("- negative controls: none")
    if isinstance(r.details, dict) and r.details:
        L.append("- details:")
        for k, v in r.details.items():
            L.append(f"  - {k}: {short(v, 120)}")
    for note in notes:
        L.append(f"- figure not drawn: {note}")
    L.append("")
    for name, path in figs:
        L += [f"![{r.id}: {name}](figures/{path.name})", ""]
    return L


def _errata_section(results, statuses) -> list[str]:
    L = ["## Errata", ""]
    try:
        import theory

        records = [cf for cf in theory.records() if cf.erratum]
        from .check import checks

        registered = checks()
    except (ImportError, ValueError) as exc:  # a broken topic module must not lose the run
        return L + [f"The closed-form registry could not be read: `{exc}`", ""]
    if not records:
        return L + ["No registered closed form carries an erratum.", ""]
    L += ["Closed forms whose printed form in the paper differs from the derived one.", ""]
    by_id = {r.id: (r, st) for r, st in zip(results, statuses)}
    for cf in records:
        L += [f"### `{cf.id}`", "", f"{cf.title} ({cf.source}; {cf.status})", ""]
        L += [textwrap.fill(" ".join(cf.erratum.split()), 100), ""]
        ran = [c for c in by_id if cf.id in by_id[c][0].covers]
        not_run = [c.id for c in registered if cf.id in c.covers and c.id not in by_id]
        if not ran and not not_run:
            L += ["No check covers it.", ""]
            continue
        L.append("Checks covering it:")
        L.append("")
        for cid in ran:
            r, st = by_id[cid]
            L.append(f"- [`{cid}`](#{_anchor(cid)}): **{st}** (discrepancy "
                     f"{_fmt(r.discrepancy)} vs tolerance {_fmt(r.tolerance)})")
        for cid in not_run:
            L.append(f"- `{cid}`: not run")
        L.append("")
    refuting = [c for c in registered if c.refutes]
    if refuting:
        L += ["Statements that are not registered formulas (an identity between computations, a "
              "gradient over token matrices), refuted as printed by a check:", ""]
    for c in refuting:
        for where, what in c.refutes:
            L += [f"### {where}", "", textwrap.fill(" ".join(what.split()), 100), ""]
            if c.id in by_id:
                r, st = by_id[c.id]
                L += [f"Decided by [`{c.id}`](#{_anchor(c.id)}): **{st}** (discrepancy "
                      f"{_fmt(r.discrepancy)} vs tolerance {_fmt(r.tolerance)})", ""]
            else:
                L += [f"Decided by `{c.id}`: not run", ""]
    return L


# -- figures ------------------------------------------------------------------------
def _render_all(results, out: Path):
    """Draw every figure spec; returns ({check id: [(name, path)]}, {check id: [notes]})."""
    drawn: dict[str, list] = {}
    notes: dict[str, list] = {}
    wanted = [r for r in results if getattr(r, "figures", None)]
    if not wanted or not _have_matplotlib():
        return drawn, notes
    fig_dir = out / "figures"
    fig_dir.mkdir(exist_ok=True)
    for r in wanted:
        for name, spec in r.figures.items():
            path = fig_dir / f"{_slug(r.id)}-{_slug(str(name))}.png"
            try:
                render_figure(spec, path)
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                notes.setdefault(r.id, []).append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            drawn.setdefault(r.id, []).append((str(name), path))
    return drawn, notes


def _have_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


_STYLES = {"-": dict(linestyle="-"), "--": dict(linestyle="--"), ":": dict(linestyle=":"),
           "o": dict(linestyle="none", marker="o", markersize=4)}


def render_figure(spec: dict, path) -> None:
    """Draw one figure spec (see the module docstring) to a PNG at ``path`` (Agg)."""
    import warnings

    from matplotlib.figure import Figure

    kind = spec.get("kind")
    if kind not in ("lines", "heatmaps"):
        raise ValueError(f"kind: expected 'lines' or 'heatmaps', got {kind!r}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. log axes with non-positive data
        fig = _lines(spec, Figure) if kind == "lines" else _heatmaps(spec, Figure)
        fig.savefig(path, dpi=130)


def _title(text) -> str:
    return textwrap.fill(str(text), 70) if text else ""


def _lines(spec: dict, Figure):
    import numpy as np

    series = spec["series"]
    if not series:
        raise ValueError("series: empty")
    many = len(series) > 6
    fig = Figure(figsize=(7.5 if many else 6.4, 4.4), layout="constrained")
    ax = fig.add_subplot()
    labelled = False
    for s in series:
        x = np.asarray(s["x"], dtype=float).ravel()
        y = np.asarray(s["y"], dtype=float).ravel()
        if x.shape != y.shape:
            raise ValueError(f"series {s.get('label')!r}: x has {x.size} points, y {y.size}")
        style = s.get("style", "-")
        if style not in _STYLES:
            raise ValueError(f"style: expected one of {tuple(_STYLES)}, got {style!r}")
        kw = dict(_STYLES[style])
        if s.get("color") is not None:
            kw["color"] = s["color"]
        label = s.get("label")
        labelled |= bool(label)
        if s.get("yerr") is not None:
            yerr = np.asarray(s["yerr"], dtype=float).ravel()
            kw.setdefault("marker", "o")
            kw.setdefault("markersize", 4)
            ax.errorbar(x, y, yerr=yerr, label=label, capsize=2, elinewidth=0.8, **kw)
        else:
            ax.plot(x, y, label=label, linewidth=1.6, **kw)
    ax.set_xscale(spec.get("xscale", "linear"))
    ax.set_yscale(spec.get("yscale", "linear"))
    ax.set_xlabel(spec.get("xlabel", ""))
    ax.set_ylabel(spec.get("ylabel", ""))
    ax.set_title(_title(spec.get("title", "")), fontsize=11)
    ax.grid(True, which="major", alpha=0.3)
    if labelled:
        if many:
            ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small",
                      frameon=False)
        else:
            ax.legend(loc="best", fontsize="small")
    return fig


def _heatmaps(spec: dict, Figure):
    import numpy as np

    panels = spec["panels"]
    if not panels:
        raise ValueError("panels: empty")
    mats = [np.asarray(p["matrix"], dtype=float) for p in panels]
    for p, m in zip(panels, mats):
        if m.ndim != 2:
            raise ValueError(f"panel {p.get('label')!r}: expected a 2-d matrix, got shape {m.shape}")
    finite = np.concatenate([m[np.isfinite(m)].ravel() for m in mats] + [np.zeros(0)])
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if lo < 0 < hi:
        bound = max(-lo, hi)
        cmap, vmin, vmax = "RdBu_r", -bound, bound
    else:
        cmap, vmin, vmax = "viridis", lo, hi if hi > lo else lo + 1.0
    ncols = min(len(mats), 4)
    nrows = -(-len(mats) // ncols)
    fig = Figure(figsize=(3.2 * ncols + 1.0, 3.2 * nrows + 0.8), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    im = None
    for k, ax in enumerate(axes.flat):
        if k >= len(mats):
            ax.set_axis_off()
            continue
        m = mats[k]
        # square cells for matrices; long thin maps (e.g. a quantity over training) fill the panel
        aspect = "auto" if max(m.shape) > 3 * min(m.shape) else "equal"
        im = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest", aspect=aspect)
        ax.set_title(_title(panels[k].get("label", "")), fontsize=10)
        if m.shape[0] <= 10 and m.shape[1] <= 10:
            ax.set_xticks(range(m.shape[1]))
            ax.set_yticks(range(m.shape[0]))
            if m.size <= 36:
                _annotate(ax, m, im)
        ax.tick_params(labelsize=8)
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.85)
    if spec.get("title"):
        fig.suptitle(_title(spec["title"]), fontsize=11)
    return fig


def _annotate(ax, m, im) -> None:
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            v = m[i, j]
            r, g, b, _ = im.cmap(im.norm(v)) if math.isfinite(v) else (1, 1, 1, 1)
            dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
            ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=7,
                    color="white" if dark else "black")
