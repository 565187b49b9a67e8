"""The verification report: ``results.json``, ``report.md`` and figures.

:func:`write_report` writes, into one folder,

``results.json``
    ``{"partial": bool, "metadata": {...}, "summary": {...}, "results": [...]}``: library
    versions, platform, device, seed, profile and date; one record per check and seed
    (:meth:`verify.registry.CheckResult.as_json` plus ``status``: passed, failed or skipped).
    A run over several seeds (``--seeds``) records ``metadata["seeds"]`` and adds
    ``pass_rates`` (one entry per check). ``partial`` is true for a run stopped with Ctrl-C.
``report.md``
    The metadata and summary (marked ``PARTIAL (interrupted)`` for a stopped run); the pass
    rate of each check over the seeds (with ``--seeds``); one table per topic (the first two
    components of the check id, e.g. ``linear_attention.merged``); each check's criterion,
    negative controls and details; the errata that the checks of the run put to the test (the
    registered closed forms whose printed form differs, and the refuted statements), each with
    the verdict of its checks.
``figures/<check-id>-<name>.png``
    One PNG per figure spec returned by a check (when matplotlib is installed), with the same
    figure as SVG and its numbers as CSV beside it; a run over several seeds names them
    ``<check-id>-seed<seed>-<name>.png``. Which runs are drawn is ``figures_of``
    (:data:`FIGURE_CHOICES`; every run by default here, the first seed's by default on the command
    line); the other runs' figures are written as CSV data only.

Nothing is written into the folder until the report is complete: :class:`ReportFolder`
checks the folder before a run, the files are written into a staging folder next to it,
and :meth:`ReportFolder.commit` moves them into place (a previous report is replaced only
then). A folder holding anything other than a previous report is refused unless
``overwrite`` is given; even then only ``results.json``, ``report.md`` and ``figures/`` are
replaced.

Figure specs (``Outcome.figures``: name -> spec)
------------------------------------------------
Lines, e.g. theory curves against simulation::

    {"kind": "lines", "title": str, "xlabel": str, "ylabel": str,
     "xscale": "linear" | "log" (optional), "yscale": ... (optional),
     "series": [{"label": str, "x": list, "y": list,
                 "style": "-" | "--" | ":" | "o" (optional, default "-"),
                 "color": a matplotlib colour (optional),
                 "group": str (optional: one condition, e.g. "w_init=0.1"),
                 "yerr": list (optional error bars)}]}

Series of one ``group`` (the theory and the simulation of one condition) share a colour, the
next of the colour cycle at the group's first series, and differ by their styles; a series
without a group takes a colour of its own. A labelled line that lies on an earlier line (or
markers on earlier markers: the same points to within 0.2 % of the axis range) would hide under
it: it is drawn on top, thinner and dashed, and its legend entry says which curve it lies on.

Heat maps, e.g. a measured matrix next to the predicted one (one shared colour scale)::

    {"kind": "heatmaps", "title": str,
     "panels": [{"label": str, "matrix": 2-d list}]}
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import textwrap
import threading
from pathlib import Path
from typing import Iterable

__all__ = ["write_report", "write_files", "metadata", "source_commit", "render_figure", "draw_figure", "draw_ahead",
           "group_of", "paper_heading", "status_of", "pass_rates", "format_seeds", "rate_text",
           "worst_text",
           "ReportFolder", "report_kind", "partial_destination", "sigint_deferred"]

#: The entries of a report folder.
REPORT_FILES = ("results.json", "report.md")
FIGURES = "figures"
#: Which runs' figures a report draws (``--figures``): ``first``, the runs at the first seed of the
#: run (every check, and every settings point of a sweep, once); ``all``, every run; ``none``, no
#: run. The numbers behind every run's figures are written as CSV whichever is chosen.
FIGURE_CHOICES = ("first", "all", "none")


def check_figures_of(figures_of: str) -> str:
    """``figures_of`` if it is one of :data:`FIGURE_CHOICES`, else ``ValueError`` naming it."""
    if figures_of not in FIGURE_CHOICES:
        raise ValueError(f"figures_of: expected one of {', '.join(FIGURE_CHOICES)}, got {figures_of!r}")
    return figures_of


def draws_figures(figures_of: str, seed: int, seeds: list[int] | None) -> bool:
    """Whether a run at ``seed`` of a run over ``seeds`` (None: one seed) has its figures drawn
    under ``figures_of`` (:data:`FIGURE_CHOICES`; ``first`` is the lowest seed)."""
    if check_figures_of(figures_of) == "none":
        return False
    return figures_of == "all" or not seeds or seed == min(seeds)
#: Version of the layout of results.json (verify/schemas/results.schema.json describes it). 2: a
#: non-finite number is null and listed in its record's "nonfinite" field (1 wrote "nan" strings);
#: each record carries its "settings".
SCHEMA_VERSION = 2
#: What a figure is written as, besides its data (CSV) beside it.
FIGURE_FORMATS = (".png", ".svg")
#: The results store of a run (verify.results) and SQLite's write-ahead files beside it.
STORE_FILES = ("results.sqlite", "results.sqlite-wal", "results.sqlite-shm")
#: The table of a sweep (verify.sweep), in the report of a sweep only.
SWEEP_FILES = ("sweep.csv", "sweep.json")

_PACKAGES = ("numpy", "scipy", "sympy", "mpmath", "torch", "matplotlib")


# -- metadata -----------------------------------------------------------------------
def metadata(*, profile: str, seed: int | None, device: str,
             seeds: list[int] | None = None) -> dict:
    """Versions, platform and run settings recorded with every report.

    ``seeds`` (a run over several seeds) is recorded as ``seeds``; ``seed`` is then the
    single seed when there is one, else None.
    """
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        if importlib.util.find_spec(name) is None:
            continue
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            mod = sys.modules.get(name)
            versions[name] = getattr(mod, "__version__", "unknown")
    from theory import __version__ as toolkit
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
    if seeds is not None:
        meta["seeds"] = list(seeds)
        meta["seed"] = seeds[0] if len(seeds) == 1 else None
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



# -- seeds --------------------------------------------------------------------------
def format_seeds(seeds: Iterable[int]) -> str:
    """Seeds as short ranges, e.g. ``[0, 1, 2, 5, 7, 8]`` -> ``"0-2, 5, 7-8"``."""
    parts: list[str] = []
    run: list[int] = []
    for s in sorted(set(seeds)):
        if run and s == run[-1] + 1:
            run.append(s)
            continue
        if run:
            parts.append(_seed_run(run))
        run = [s]
    if run:
        parts.append(_seed_run(run))
    return ", ".join(parts)


def _seed_run(run: list[int]) -> str:
    """Consecutive seeds as ``a`` or ``a-b``."""
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def _ratio(res) -> float:
    """discrepancy / tolerance of one result; NaN when either is missing or not a number."""
    try:
        d, t = float(res.discrepancy), float(res.tolerance)
    except (TypeError, ValueError):
        return math.nan
    if math.isnan(d) or math.isnan(t):
        return math.nan
    if t == 0:  # a count that must be 0 (or a margin that must be <= 0): passed means d <= 0
        return 0.0 if d <= 0 else math.inf
    return d / t


def pass_rates(results: Iterable) -> list[dict]:
    """One entry per check (first-run order) over the seeds it ran at.

    Each entry: ``id``, ``passed``, ``run`` (runs not skipped), ``skipped``, ``failed_seeds``,
    ``worst_ratio`` (the largest discrepancy / tolerance; NaN, the worst, when a run
    crashed or had no numbers) and ``worst_seed``.
    """
    rates: dict[str, dict] = {}
    for r in results:
        e = rates.setdefault(r.id, {"id": r.id, "passed": 0, "run": 0, "skipped": 0,
                                    "failed_seeds": [], "worst_ratio": None,
                                    "worst_seed": None})
        st = status_of(r)
        if st == "skipped":
            e["skipped"] += 1
            continue
        e["run"] += 1
        if st == "passed":
            e["passed"] += 1
        else:
            e["failed_seeds"].append(r.seed)
        ratio = _ratio(r)
        if e["worst_ratio"] is None or _worse(ratio, e["worst_ratio"]):
            e["worst_ratio"], e["worst_seed"] = ratio, r.seed
    return list(rates.values())


def _worse(a: float, b: float) -> bool:
    """Whether ratio ``a`` is worse than ``b`` (NaN counts as the worst)."""
    if math.isnan(b):
        return False
    return math.isnan(a) or a > b


# -- the report folder --------------------------------------------------------------
@contextlib.contextmanager
def sigint_deferred():
    """Hold Ctrl-C (SIGINT) while the block runs; raise KeyboardInterrupt after it if one came.

    For the few renames that move a finished report or archive record into place, so that
    they are not left half done. Outside the main thread (where signals cannot be caught)
    the block runs unprotected.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
    if caught:
        raise KeyboardInterrupt


def report_kind(path, ignore: Iterable[str] = ()) -> str:
    """What ``path`` holds: ``missing``, ``empty``, ``report``, ``partial`` (the report of an
    interrupted run), ``other`` (a folder with anything else in it) or ``file``. Entries
    named in ``ignore`` are left out.

    A report is a folder holding a ``results.json`` written by :func:`write_report` and
    nothing but ``report.md``, ``figures/`` (PNG files) and a sweep's table besides; the results store
    (:data:`STORE_FILES`, written during the run) may be there too, in any kind of report
    folder.
    """
    path = Path(path)
    if not path.exists():
        return "file" if path.is_symlink() else "missing"
    if not path.is_dir():
        return "file"
    names = {p.name for p in path.iterdir()} - set(ignore) - set(STORE_FILES)
    if not names:
        return "empty"
    if "results.json" not in names or not names <= {*REPORT_FILES, FIGURES, *SWEEP_FILES}:
        return "other"
    if any(n in names and not (path / n).is_file() for n in (*REPORT_FILES, *SWEEP_FILES)):
        return "other"
    fig_dir = path / FIGURES
    if FIGURES in names and not (fig_dir.is_dir() and all(
            p.is_file() and p.suffix in (*FIGURE_FORMATS, ".csv") for p in fig_dir.iterdir())):
        return "other"
    try:
        doc = json.loads((path / "results.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return "other"
    if not (isinstance(doc, dict) and isinstance(doc.get("metadata"), dict)
            and isinstance(doc.get("results"), list)):
        return "other"
    return "partial" if doc.get("partial") is True else "report"


def partial_destination(target) -> Path | None:
    """Where the report of an interrupted run goes without replacing a complete report.

    ``target`` itself when it is missing, empty or holds an earlier partial report, else
    the folder ``<target>-partial`` under the same conditions, else None.
    """
    target = Path(os.path.abspath(target))
    for cand in (target, target.with_name(target.name + "-partial")):
        if report_kind(cand) in ("missing", "empty", "partial"):
            return cand
    return None


class ReportFolder:
    """A report folder, checked before a run and replaced in one step after it.

    Creating one checks that ``path`` can take a report (not a file, not under a file, not
    a folder of other files unless ``overwrite``, writable) and makes a staging folder next
    to it on the same file system (inside it when its parent is not writable). Write the
    report into :attr:`staging`, then call :meth:`commit`; :meth:`discard` removes the
    staging folder (call it in a ``finally``). Bad folders raise ``ValueError`` naming
    ``param``.
    """

    def __init__(self, path, *, overwrite: bool = False, param: str = "out_dir"):
        self.shown = str(path)
        self.param = param
        self.overwrite = overwrite
        self.target = Path(os.path.abspath(path))
        self.kind = self._check_target()
        self.staging = self._make_staging()

    def _fail(self, problem: str) -> ValueError:
        """The error for this folder: ``<param>: '<path>' <problem>``."""
        return ValueError(f"{self.param}: {self.shown!r} {problem}")

    def _check_target(self) -> str:
        """The folder's :func:`report_kind` (staging left out); raises if it cannot take a
        report."""
        staging = getattr(self, "staging", None)
        try:
            kind = report_kind(self.target, ignore=[staging.name] if staging else [])
        except OSError as exc:
            raise self._fail(f"cannot be read ({exc.strerror or exc})") from None
        if kind == "file":
            raise self._fail("is a file, not a folder")
        if kind == "other" and not self.overwrite:
            hint = "--overwrite" if self.param.startswith("--") else "overwrite=True"
            raise self._fail("holds files that are not a verify report; choose another folder "
                             f"or pass {hint} (only results.json, report.md and figures/ "
                             "are replaced)")
        if kind == "missing":
            ancestor = self.target.parent
            while not ancestor.exists():
                ancestor = ancestor.parent
            if not ancestor.is_dir():
                raise ValueError(f"{self.param}: {str(ancestor)!r} is a file, not a folder")
        return kind

    def _make_staging(self) -> Path:
        """Create the staging folder: beside the target (same file system), else inside it."""
        parent = self.target.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._fail(f"cannot be created ({exc.strerror or exc})") from None
        places = [parent]
        if self.kind != "missing":
            self._probe(self.target)
            if os.stat(parent).st_dev != os.stat(self.target).st_dev:
                places = [self.target]  # a mount point: stage on its file system
            else:
                places.append(self.target)
        error = None
        for place in places:
            try:
                return Path(tempfile.mkdtemp(prefix=f".{self.target.name}.writing-",
                                             dir=place))
            except OSError as exc:
                error = exc
        raise self._fail(f"cannot be written ({error.strerror or error})")

    def _probe(self, folder: Path) -> None:
        """Fail unless a file can be created in ``folder`` (and removed again)."""
        try:
            fd, name = tempfile.mkstemp(prefix=".verify-probe-", dir=folder)
            os.close(fd)
            os.unlink(name)
        except OSError as exc:
            raise self._fail(f"cannot be written ({exc.strerror or exc})") from None

    def commit(self) -> Path:
        """Move the staged report into place; returns the report folder.

        A missing folder is renamed into place in one step; otherwise ``figures/``,
        ``results.json`` and ``report.md`` are swapped in one after another with Ctrl-C
        held, and the previous figures are removed afterwards.
        """
        kind = self._check_target()
        with sigint_deferred():
            if kind == "missing":
                os.rename(self.staging, self.target)
                return self.target
            old_figures = self.target / FIGURES
            if old_figures.exists() or old_figures.is_symlink():
                os.rename(old_figures, self.staging / ".previous-figures")
            if (self.staging / FIGURES).exists():
                os.rename(self.staging / FIGURES, self.target / FIGURES)
            for name in REPORT_FILES:
                os.replace(self.staging / name, self.target / name)
            for name in SWEEP_FILES:  # a sweep's table, or none (a stale one goes)
                if (self.staging / name).is_file():
                    os.replace(self.staging / name, self.target / name)
                elif (self.target / name).is_file():
                    os.remove(self.target / name)
        self.discard()
        return self.target

    def set_aside(self) -> Path | None:
        """Keep the staged report as ``<folder>.unsaved-<UTC time>`` beside the folder (when
        it could not be moved into place); returns where, or None if that failed too."""
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        aside = self.staging.parent / f"{self.target.name}.unsaved-{stamp}"
        try:
            os.rename(self.staging, aside)
        except OSError:
            return None
        return aside

    def discard(self) -> None:
        """Remove the staging folder (and the previous figures moved into it), if still there."""
        if self.staging.is_dir():
            shutil.rmtree(self.staging, ignore_errors=True)


# -- report -------------------------------------------------------------------------
_PARTIAL = "PARTIAL (interrupted)"


def write_report(results: Iterable, out_dir, *, profile: str, seed: int | None, device: str,
                 seconds: float, seeds: list[int] | None = None, partial: bool = False,
                 overwrite: bool = False, figures_of: str = "all") -> dict[str, Path]:
    """Write ``results.json``, ``report.md`` and figures into ``out_dir``, all or nothing.

    The files are written into a staging folder next to ``out_dir`` and moved into place
    when complete (:class:`ReportFolder`), so a previous report there is replaced only by
    a finished one.

    Parameters
    ----------
    results : iterable of verify.registry.CheckResult
        The checks of one run, in run order (one result per check and seed).
    out_dir : str or Path
        Folder to write (created if missing). It may hold a previous report; a folder with
        anything else in it raises ``ValueError`` unless ``overwrite``.
    profile, seed, device : str, int, str
        The run's settings, recorded in the metadata.
    seconds : float
        Wall time of the whole run.
    seeds : list of int, optional
        The seeds of a run over several seeds (``--seeds``): adds the pass-rate table.
    partial : bool
        The run was interrupted: the report is marked ``PARTIAL (interrupted)``.
    overwrite : bool
        Write into a folder that holds other files too (only the report's own entries are
        replaced).
    figures_of : {"all", "first", "none"}
        Which runs' figures are drawn (:data:`FIGURE_CHOICES`); the others' are written as CSV
        data only.

    Returns
    -------
    dict
        ``{"results.json": path, "report.md": path, "figures": [paths]}``.
    """
    folder = ReportFolder(out_dir, overwrite=overwrite, param="out_dir")
    try:
        paths = write_files(results, folder.staging, profile=profile, seed=seed,
                            device=device, seconds=seconds, seeds=seeds, partial=partial,
                            figures_of=figures_of)
        target = folder.commit()
    finally:
        folder.discard()
    return {"results.json": target / "results.json", "report.md": target / "report.md",
            "figures": [target / FIGURES / p.name for p in paths["figures"]]}


def write_files(results: Iterable, out_dir, *, profile: str, seed: int | None, device: str,
                seconds: float, seeds: list[int] | None = None, partial: bool = False,
                figures: bool = True, figures_of: str = "all") -> dict[str, Path]:
    """Write the report's files straight into ``out_dir`` (a staging folder).

    Same parameters as :func:`write_report`; ``figures=False`` skips drawing (the report
    says so); ``figures_of`` (:data:`FIGURE_CHOICES`) says which runs' figures are drawn, the
    others' written as CSV data only. ``results.json`` is written first, so the numbers are
    safe before the figures are drawn.
    """
    check_figures_of(figures_of)  # before anything is written
    from verify.jsonable import to_jsonable  # numpy is loaded only when a report is written

    results = list(results)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = metadata(profile=profile, seed=seed, device=device, seeds=seeds)
    statuses = [status_of(r) for r in results]
    summary = {"passed": statuses.count("passed"), "failed": statuses.count("failed"),
               "skipped": statuses.count("skipped"), "seconds": round(float(seconds), 3)}
    rates = pass_rates(results) if seeds is not None else None

    records = []
    for r, st in zip(results, statuses):
        rec = r.as_json()
        rec["status"] = st
        records.append(rec)
    doc = {"schema_version": SCHEMA_VERSION, "partial": bool(partial), "metadata": meta, "summary": summary}
    if rates is not None:
        doc["pass_rates"] = rates
    doc["results"] = records
    json_path = out / "results.json"
    _write_atomic(json_path, json.dumps(to_jsonable(doc), indent=2, allow_nan=False) + "\n")

    multi = len({r.seed for r in results}) > 1
    varying = _varying_settings(results)
    drawn, figure_notes = (_render_all(results, out, multi, varying, figures_of=figures_of, seeds=seeds)
                           if figures else ({}, {}))
    view = _View(multi=multi, partial=partial, figures_skipped=not figures, rates=rates, varying=varying)
    md_path = out / "report.md"
    _write_atomic(md_path, _markdown(results, statuses, meta, summary, drawn, figure_notes,
                                     view))
    return {"results.json": json_path, "report.md": md_path,
            "figures": [p for ps in drawn.values() for _, p in ps]}


class _View:
    """How the Markdown shows a run: several seeds, partial, figures skipped, pass rates."""

    def __init__(self, *, multi: bool = False, partial: bool = False,
                 figures_skipped: bool = False, rates: list[dict] | None = None,
                 varying: dict | None = None):
        self.multi = multi
        self.partial = partial
        self.figures_skipped = figures_skipped
        self.rates = rates
        self.varying = varying or {}

    def settings_text(self, r) -> str:
        """The settings that tell this run from other runs of its check (a sweep), e.g. ``d=8``."""
        names = self.varying.get(r.id, ())
        return ", ".join(f"{n}={_setting_text(getattr(r, 'settings', {}).get(n))}" for n in names)

    def key(self, r) -> str:
        """What tells one run from another: the check id, plus the seed over several seeds, plus
        the settings that vary between runs of the check."""
        key = f"{r.id} (seed {r.seed})" if self.multi else r.id
        extra = self.settings_text(r)
        return f"{key} [{extra}]" if extra else key

    def anchor(self, r) -> str:
        """The HTML anchor of a run's section in report.md."""
        extra = self.settings_text(r)
        return _anchor((f"{r.id}-seed{r.seed}" if self.multi else r.id) + (f"-{extra}" if extra else ""))


def _setting_text(v) -> str:
    if isinstance(v, list):
        return ",".join(_setting_text(x) for x in v)
    return f"{v:g}" if isinstance(v, float) else str(v)


def _varying_settings(results) -> dict[str, list[str]]:
    """check id -> the names of its settings whose values differ between its runs (a sweep)."""
    seen: dict[str, dict[str, set]] = {}
    for r in results:
        for n, v in (getattr(r, "settings", None) or {}).items():
            seen.setdefault(r.id, {}).setdefault(n, set()).add(json.dumps(v, sort_keys=True, default=str))
    return {i: [n for n, vals in names.items() if len(vals) > 1] for i, names in seen.items()
            if any(len(vals) > 1 for vals in names.values())}


def _summary_text(summary: dict, partial: bool = False) -> str:
    s = f"{summary['passed']} passed, {summary['failed']} failed"
    if summary["skipped"]:
        s += f", {summary['skipped']} skipped"
    s = f"{s} in {summary['seconds']:.1f} s"
    return f"{_PARTIAL}: {s}" if partial else s


def _seed_words(meta: dict) -> str:
    """``seed 3`` or ``seeds 0-19`` for the report's summary line."""
    if meta.get("seeds") is not None and len(meta["seeds"]) > 1:
        return f"seeds {format_seeds(meta['seeds'])}"
    return f"seed {meta['seed']}"


def _markdown(results, statuses, meta, summary, figures, figure_notes,
              view: _View | None = None) -> str:
    view = view or _View()
    L: list[str] = []
    add = L.append
    add(f"# Verification report: {_PARTIAL}" if view.partial else "# Verification report")
    add("")
    if view.partial:
        add(f"**{_PARTIAL}.** The run was stopped with Ctrl-C; only the checks that finished "
            "are listed" + (", and figures were not drawn." if view.figures_skipped else "."))
        add("")
    add(f"**{_summary_text(summary, view.partial)}** (profile `{meta['profile']}`, "
        f"{_seed_words(meta)}, device `{meta['device']}`)")
    add("")
    add("| | |")
    add("|---|---|")
    add(f"| date (UTC) | {meta['date']} |")
    for key in ("profile", "seed", "device", "toolkit", "cuda_device"):
        if meta.get(key) is not None:
            add(f"| {key} | {_cell(meta[key])} |")
    if meta.get("seeds") is not None:
        add(f"| seeds | {format_seeds(meta['seeds'])} |")
    add("| versions | " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + " |")
    add(f"| platform | {_cell(meta['platform'])} ({meta['cpu_count']} CPUs) |")
    add("")
    add("A check passes when its discrepancy is within tolerance **and** every negative "
        "control (a wrong form the same test must reject) is rejected.")
    add("")

    if not results:
        add("No checks were run.")
        add("")
    if view.rates is not None and results:
        L.extend(_pass_rate_section(view.rates))

    groups: dict[str, list] = {}
    try:
        from theory.papers import PAPERS

        order = {t: k for k, t in enumerate(PAPERS)}
    except ImportError:
        order = {}
    for r, st in sorted(zip(results, statuses),
                        key=lambda x: (order.get(x[0].id.split(".")[0], len(order)), x[0].id,
                                       x[0].seed)):
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
            seed = f" (seed {r.seed})" if view.multi else ""
            if view.settings_text(r):
                seed += f" [{view.settings_text(r)}]"
            add(f"| [`{r.id}`](#{view.anchor(r)}){seed} | {covers} | {r.method} | {_cell(mvp)} | "
                f"{_fmt(r.discrepancy)} | {_fmt(r.tolerance)} | {mark} | {r.seconds:.1f} |")
        add("")

    if results:
        add("## Criteria, negative controls and details")
        add("")
        for r, st in zip(results, statuses):
            key = view.key(r)
            L.extend(_check_section(r, st, figures.get(key, []), figure_notes.get(key, []),
                                    view))

    L.extend(_errata_section(results, statuses, view))
    return "\n".join(L).rstrip() + "\n"


def _pass_rate_section(rates: list[dict]) -> list[str]:
    """The pass rate of each check over the seeds of the run."""
    L = ["## Pass rate over seeds", "",
         "| check | passed / run | failed at seeds | worst discrepancy / tolerance |",
         "|---|---:|---|---:|"]
    for e in rates:
        L.append(f"| `{e['id']}` | {rate_text(e)} | {format_seeds(e['failed_seeds']) or '–'} "
                 f"| {worst_text(e)} |")
    return L + [""]


def rate_text(e: dict) -> str:
    """``passed/run`` of a pass-rate entry (``skipped`` when it never ran)."""
    if not e["run"]:
        return "skipped"
    return f"{e['passed']}/{e['run']}" + (f" ({e['skipped']} skipped)" if e["skipped"] else "")


def worst_text(e: dict) -> str:
    """The worst discrepancy / tolerance of a pass-rate entry and its seed."""
    if e["worst_ratio"] is None:
        return "–"
    value = "nan" if math.isnan(e["worst_ratio"]) else f"{e['worst_ratio']:.3g}"
    return f"{value} (seed {e['worst_seed']})"


def _check_section(r, st, figs, notes, view: _View | None = None) -> list[str]:
    view = view or _View()
    L = [f'<a id="{view.anchor(r)}"></a>', "", f"### {view.key(r)}", ""]
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
            expected = (f" (expected {_fmt(c['expected'])})" if c.get("expected") is not None
                        else "")
            L.append(f"  - {c.get('name')}: discrepancy {_fmt(c.get('discrepancy'))}{expected} vs "
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
        L += [f"![{view.key(r)}: {name}](figures/{path.name})", ""]
    return L


def _verdict(runs: list, view: _View) -> str:
    """How the runs of one check came out, for the errata section."""
    if not view.multi or len(runs) == 1:
        r, st = runs[0]
        return (f"**{st}** (discrepancy {_fmt(r.discrepancy)} vs tolerance "
                f"{_fmt(r.tolerance)})")
    (e,) = pass_rates(r for r, _ in runs)
    failed = format_seeds(e["failed_seeds"])
    return (f"**passed at {e['passed']} of {e['run']} seeds**"
            + (f" (failed at seeds {failed})" if failed else "")
            + f"; worst discrepancy / tolerance {worst_text(e)}")


def _errata_section(results, statuses, view: _View | None = None) -> list[str]:
    view = view or _View()
    L = ["## Errata", ""]
    try:
        import theory

        records = [cf for cf in theory.records() if cf.erratum]
        from .registry import all_checks

        registered = all_checks()
    except (ImportError, ValueError) as exc:  # a broken topic module must not lose the run
        return L + [f"The closed-form registry could not be read: `{exc}`", ""]
    by_id: dict[str, list] = {}
    for r, st in zip(results, statuses):
        if not (r.details or {}).get("skipped"):  # a skipped check decided nothing
            by_id.setdefault(r.id, []).append((r, st))
    # only what the checks of this run put to the test (the errata page, docs/errata.md, lists them all)
    decided = [(cf, [c for c in by_id if cf.id in by_id[c][0][0].covers]) for cf in records]
    decided = [(cf, ran) for cf, ran in decided if ran]
    refuting = [c for c in registered if c.refutes and c.id in by_id]
    if not decided and not refuting:
        return L + ["No check of this run puts a printed formula of a paper to the test (the errata page "
                    "of the documentation lists every erratum the toolkit found).", ""]
    if decided:
        L += ["Closed forms whose printed form in the paper differs from the derived one, with the checks "
              "of this run that cover them.", ""]
    for cf, ran in decided:
        L += [f"### `{cf.id}`", "", f"{cf.title} ({cf.citation}; {cf.status})", ""]
        L += [textwrap.fill(" ".join(cf.erratum.split()), 100), ""]
        L.append("Checks covering it:")
        L.append("")
        for cid in ran:
            first = by_id[cid][0][0]
            L.append(f"- [`{cid}`](#{view.anchor(first)}): {_verdict(by_id[cid], view)}")
        L.append("")
    if refuting:
        L += ["Statements that are not registered formulas (an identity between computations, a "
              "gradient over token matrices), refuted as printed by a check of this run:", ""]
    for c in refuting:
        for where, what in c.refutes:
            first = by_id[c.id][0][0]
            L += [f"### {where}", "", textwrap.fill(" ".join(what.split()), 100), "",
                  f"Decided by [`{c.id}`](#{view.anchor(first)}): {_verdict(by_id[c.id], view)}", ""]
    return L


# -- figures ------------------------------------------------------------------------
def _render_all(results, out: Path, multi: bool = False, varying: dict | None = None, *,
                figures_of: str = "all", seeds: list[int] | None = None):
    """Draw the figure specs of the runs that ``figures_of`` picks (:func:`draws_figures`) and write
    every run's figure data as CSV; returns ({run: [(name, path)]}, {run: [notes]}).

    A run is named by :meth:`_View.key`: its check id, plus its seed when ``multi`` (several
    seeds; the file names then carry the seed too).
    """
    view = _View(multi=multi, varying=varying)
    drawn: dict[str, list] = {}
    notes: dict[str, list] = {}
    wanted = [r for r in results if getattr(r, "figures", None)]
    if not wanted or not _have_matplotlib():
        return drawn, notes
    fig_dir = out / "figures"
    fig_dir.mkdir(exist_ok=True)
    for r in wanted:
        key = view.key(r)
        stem = f"{_slug(r.id)}-seed{r.seed}" if multi else _slug(r.id)
        if view.settings_text(r):
            stem += "-" + _slug(view.settings_text(r))
        ahead = getattr(r, "drawn", None) or {}
        drawing = draws_figures(figures_of, r.seed, seeds)
        for name, spec in r.figures.items():
            path = fig_dir / f"{stem}-{_slug(str(name))}.png"
            if not drawing:  # the numbers only
                try:
                    figure_data(spec, path.with_suffix(".csv"))
                except FIGURE_ERRORS as exc:
                    notes.setdefault(key, []).append(f"{name}: {type(exc).__name__}: {exc}")
                    continue
                why = "only the first seed's runs are drawn" if figures_of == "first" else "none are drawn"
                notes.setdefault(key, []).append(
                    f"{name} (--figures {figures_of}: {why}); its data: figures/{path.with_suffix('.csv').name}")
                continue
            files = ahead.get(name)
            try:
                if files is None:
                    files = draw_figure(spec)
                if isinstance(files, str):  # drawn ahead, and it could not be
                    raise ValueError(files)
                _write_figure(files, path)
                figure_data(spec, path.with_suffix(".csv"))
            except FIGURE_ERRORS as exc:
                text = str(exc) if isinstance(files, str) else f"{type(exc).__name__}: {exc}"
                notes.setdefault(key, []).append(f"{name}: {text}")
                continue
            drawn.setdefault(key, []).append((str(name), path))
    return drawn, notes


def _have_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


_STYLES = {"-": dict(linestyle="-"), "--": dict(linestyle="--"), ":": dict(linestyle=":"),
           "o": dict(linestyle="none", marker="o", markersize=4)}


def figure_data(spec: dict, path) -> None:
    """The numbers behind a figure spec as CSV at ``path``: a line plot as ``series,x,y,yerr``
    rows, heat maps as ``panel,row,col,value`` rows."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if spec.get("kind") == "heatmaps":
        w.writerow(["panel", "row", "col", "value"])
        for p in spec["panels"]:
            for i, row in enumerate(p["matrix"]):
                for j, v in enumerate(row):
                    w.writerow([p.get("label", ""), i, j, v])
    else:
        w.writerow(["series", "x", "y", "yerr"])
        for sr in spec["series"]:
            yerr = sr.get("yerr") or [""] * len(sr["y"])
            for x, y, e in zip(sr["x"], sr["y"], yerr):
                w.writerow([sr.get("label", ""), x, y, e])
    Path(path).write_text(buf.getvalue(), encoding="utf-8")


def draw_figure(spec: dict) -> dict[str, bytes]:
    """Draw one figure spec (see the module docstring) in every :data:`FIGURE_FORMATS` (Agg):
    ``{".png": bytes, ".svg": bytes}``. Raises ``KeyError``, ``TypeError``, ``ValueError`` or
    ``IndexError`` for a spec it cannot draw."""
    import io
    import warnings

    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    kind = spec.get("kind")
    if kind not in ("lines", "heatmaps"):
        raise ValueError(f"kind: expected 'lines' or 'heatmaps', got {kind!r}")
    files = {}
    with warnings.catch_warnings(), _collection_paused():
        warnings.simplefilter("ignore")  # e.g. log axes with non-positive data
        fig = _lines(spec, Figure) if kind == "lines" else _heatmaps(spec, Figure)
        # the constrained layout solved once, at the PNG's resolution, and kept for every format
        # (it is in inches); the canvases' own print methods then draw each format once, where
        # savefig, for a figure with a layout engine, first draws the whole figure with the
        # rendering switched off (a fifth of the drawing time, for the SVG too)
        fig.dpi = FIGURE_DPI
        fig.get_layout_engine().execute(fig)
        fig.set_layout_engine("none")
        buf = io.BytesIO()
        # zlib level 1: the same pixels as the default level 6 in files about 8 % larger, a few % less drawing time
        FigureCanvasAgg(fig).print_png(buf, pil_kwargs={"compress_level": 1})
        files[".png"] = buf.getvalue()
        # SVG text stays text (searchable, editable, a third of the time); no date and fixed
        # element ids, so that the same figure gives the same file
        with rc_context({"svg.fonttype": "none", "svg.hashsalt": "verify"}):
            buf = io.BytesIO()
            FigureCanvasSVG(fig).print_svg(buf, metadata={"Date": None})
            files[".svg"] = buf.getvalue()
    return files


@contextlib.contextmanager
def _collection_paused():
    """Python's cyclic garbage collector paused while a figure is drawn: a figure makes some
    hundred thousand objects, which would set off a few collections per figure, each going
    through every object of the process (a worker holds torch's); its garbage is collected once,
    after the figure, by the next collection. (Threads: whichever call paused it resumes it.)"""
    import gc

    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


#: The resolution of the PNG figures (dots per inch).
FIGURE_DPI = 130

#: The errors of a figure spec that cannot be drawn (the report notes them and goes on).
FIGURE_ERRORS = (KeyError, TypeError, ValueError, IndexError)


def render_figure(spec: dict, path) -> None:
    """Draw one figure spec to ``path``, a PNG, and beside it the same figure in the other
    :data:`FIGURE_FORMATS` (SVG)."""
    _write_figure(draw_figure(spec), Path(path))


def _write_figure(files: dict[str, bytes], png: Path) -> None:
    for ext, data in files.items():
        png.with_suffix(ext).write_bytes(data)


def draw_ahead(result) -> None:
    """Draw a finished run's figures before its report is written, into ``result.drawn``
    (:func:`draw_specs`): a run on Dask draws them on its worker, a serial run in a helper process
    beside the next check, and the report then only writes the files. Nothing when matplotlib is
    not installed."""
    if getattr(result, "figures", None) and _have_matplotlib():
        result.drawn = draw_specs(result.figures)


def draw_specs(figures: dict) -> dict:
    """Draw figure specs ``{name: spec}``: ``{name: {ext: bytes}}`` (:func:`draw_figure`), or
    ``{name: "Error: message"}`` for a spec that cannot be drawn."""
    drawn = {}
    for name, spec in figures.items():
        try:
            drawn[name] = draw_figure(spec)
        except FIGURE_ERRORS as exc:
            drawn[name] = f"{type(exc).__name__}: {exc}"
    return drawn


def _title(text) -> str:
    return textwrap.fill(str(text), 70) if text else ""


_SUPERSCRIPT = str.maketrans("0123456789-+.", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺·")


def _plain_math(label: str) -> str:
    """A log-axis tick label of matplotlib (``$\\mathdefault{2\\times10^{-3}}$``) as plain
    text (``2×10⁻³``): the same label without the mathtext parser, which took about half the
    time of drawing a figure with log axes. Anything else is returned as it came."""
    if not (len(label) > 1 and label[0] == label[-1] == "$"):
        return label
    body = label[1:-1]
    if body.startswith("\\mathdefault{") and body.endswith("}"):
        body = body[len("\\mathdefault{"):-1]
    body = body.replace("\\times", "×").replace("\\cdot", "·").replace("\\ ", " ")
    body = re.sub(r"\^\{([^{}]*)\}", lambda m: m.group(1).translate(_SUPERSCRIPT), body)
    return label if any(c in body for c in "\\{}^$") else body


@functools.cache
def _plain_log_formatter():
    """A formatter class: matplotlib's log-axis tick labels (which ticks it labels, and how) in
    plain text (:func:`_plain_math`)."""
    from matplotlib.ticker import LogFormatterSciNotation

    class PlainLogFormatter(LogFormatterSciNotation):
        def __call__(self, x, pos=None):
            return _plain_math(super().__call__(x, pos))

    return PlainLogFormatter


@functools.cache
def _in_view_log_locator():
    """A locator class: matplotlib's ``LogLocator`` less the ticks outside the axis' view."""
    import numpy as np
    from matplotlib.ticker import LogLocator

    class InViewLogLocator(LogLocator):
        def __call__(self):
            locs = super().__call__()
            lo, hi = sorted(self.axis.get_view_interval())
            if not (0 < lo and math.isfinite(hi)) or len(locs) == 0:
                return locs
            # a little slack (1e-6 of a decade): matplotlib draws the ticks within 1e-10 of the view
            slack = 10.0 ** 1e-6
            locs = np.asarray(locs)
            return locs[(locs >= lo / slack) & (locs <= hi * slack)]

    return InViewLogLocator


def _in_view(locator):
    """``locator``, a log axis' ``LogLocator``, as one that gives only the ticks in the axis' view:
    the same ticks drawn, without the Tick objects (lines, labels: about 2 ms each) that matplotlib
    makes for the decades beyond both ends and then leaves undrawn (a third of the drawing time
    of a log-log plot)."""
    cls = _in_view_log_locator()
    if type(locator) is not cls.__mro__[1]:
        return locator
    new = cls.__new__(cls)
    new.__dict__.update(locator.__dict__)
    return new


def _lines(spec: dict, Figure):
    import numpy as np

    series = spec["series"]
    if not series:
        raise ValueError("series: empty")
    many = len(series) > 6
    fig = Figure(figsize=(7.5 if many else 6.4, 4.4), layout="constrained")
    ax = fig.add_subplot()
    labelled = False
    data = []
    for s in series:
        x = np.asarray(s["x"], dtype=float).ravel()
        y = np.asarray(s["y"], dtype=float).ravel()
        if x.shape != y.shape:
            raise ValueError(f"series {s.get('label')!r}: x has {x.size} points, y {y.size}")
        style = s.get("style", "-")
        if style not in _STYLES:
            raise ValueError(f"style: expected one of {tuple(_STYLES)}, got {style!r}")
        data.append((x, y))
    colours = _series_colours(series, ax)
    hidden = _coincident(series, data, spec)
    for k, (s, (x, y)) in enumerate(zip(series, data)):
        kw = dict(_STYLES[s.get("style", "-")])
        kw["color"] = colours[k]
        label = s.get("label")
        linewidth = 1.6
        if k in hidden:  # on top of an earlier curve: drawn over it, thinner and dashed, and said so
            kw.update(linestyle=(0, (2, 2)) if kw.get("linestyle") != "none" else "none", zorder=3)
            linewidth = 1.0
            if label:
                label = f"{label} (on {hidden[k]!r})" if hidden[k] else f"{label} (on another curve)"
        labelled |= bool(label)
        if s.get("yerr") is not None:
            yerr = np.asarray(s["yerr"], dtype=float).ravel()
            kw.setdefault("marker", "o")
            kw.setdefault("markersize", 4)
            ax.errorbar(x, y, yerr=yerr, label=label, capsize=2, elinewidth=0.8, **kw)
        else:
            ax.plot(x, y, label=label, linewidth=linewidth, **kw)
    ax.set_xscale(spec.get("xscale", "linear"))
    ax.set_yscale(spec.get("yscale", "linear"))
    for axis, scale in ((ax.xaxis, spec.get("xscale")), (ax.yaxis, spec.get("yscale"))):
        if scale == "log":
            axis.set_major_locator(_in_view(axis.get_major_locator()))
            axis.set_minor_locator(_in_view(axis.get_minor_locator()))
            axis.set_major_formatter(_plain_log_formatter()())
            axis.set_minor_formatter(_plain_log_formatter()(labelOnlyBase=False))
    ax.set_xlabel(spec.get("xlabel", ""))
    ax.set_ylabel(spec.get("ylabel", ""))
    ax.set_title(_title(spec.get("title", "")), fontsize=11, y=1.0)
    ax.grid(True, which="major", alpha=0.3)
    _spines_out_of_layout(ax)
    if labelled:
        if many:
            ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small",
                      frameon=False)
        else:
            ax.legend(loc="best", fontsize="small")
    return fig


def _spines_out_of_layout(ax) -> None:
    """The axes' spines left out of the constrained layout: each spine's extent takes its axis'
    ticks updated again (four times per axes per layout pass), and it adds to the panel's extent
    only half a line width (0.4 pt) on a side where no tick label or title reaches further, well
    inside the layout's padding (3 pt)."""
    for spine in ax.spines.values():
        spine.set_in_layout(False)


def _series_colours(series: list, ax) -> list:
    """The colour of each series: its own ``color``, else its group's (the next colour of the cycle
    at the group's first series), else the next colour of the cycle."""
    cycle = _cycle_colours(ax)
    by_group: dict[str, object] = {}
    out = []
    for s in series:
        if s.get("color") is not None:
            out.append(s["color"])
            if s.get("group") is not None:
                by_group.setdefault(s["group"], s["color"])
            continue
        group = s.get("group")
        if group is None:
            out.append(next(cycle))
        else:
            if group not in by_group:
                by_group[group] = next(cycle)
            out.append(by_group[group])
    return out


def _cycle_colours(ax):
    """The axes' colour cycle (matplotlib's ``axes.prop_cycle``), repeated as needed."""
    import itertools

    from matplotlib import rcParams

    return itertools.cycle(rcParams["axes.prop_cycle"].by_key()["color"])


#: Two curves closer than this fraction of the data's y-range at every point are drawn as one.
COINCIDE = 2e-3


def _coincident(series: list, data: list, spec: dict) -> dict[int, str | None]:
    """Labelled series that lie on an earlier one drawn the same way (line on line, markers on
    markers; same x, y within :data:`COINCIDE` of the range of all y, on a log axis of the range of
    log y): index -> the earlier series' label."""
    import numpy as np

    logy = spec.get("yscale") == "log"

    def scaled(y):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log10(y) if logy else y

    every = np.concatenate([scaled(y) for _, y in data])
    every = every[np.isfinite(every)]
    span = float(every.max() - every.min()) if every.size else 0.0
    if span <= 0:
        return {}
    out: dict[int, str | None] = {}
    def marks(s):  # a line over markers (theory through simulation points) hides neither
        return s.get("style", "-") == "o"

    for k, (s, (x, y)) in enumerate(zip(series, data)):
        if not s.get("label") or x.size < 2:
            continue
        for j in range(k):
            if marks(series[j]) != marks(s):
                continue
            xj, yj = data[j]
            if xj.shape != x.shape or not np.allclose(xj, x, rtol=1e-9, atol=0):
                continue
            a, b = scaled(y), scaled(yj)
            ok = np.isfinite(a) & np.isfinite(b)
            if (ok.any() and np.array_equal(np.isfinite(a), np.isfinite(b))
                    and np.max(np.abs(a[ok] - b[ok])) <= COINCIDE * span):
                out[k] = series[j].get("label")
                break
    return out


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
    # only the panels drawn: an empty cell of the grid takes no room in the layout either way
    grid = fig.add_gridspec(nrows, ncols)
    axes = [fig.add_subplot(grid[k // ncols, k % ncols]) for k in range(len(mats))]
    im = None
    for k, ax in enumerate(axes):
        m = mats[k]
        # square cells for matrices; long thin maps (e.g. a quantity over training) fill the panel
        aspect = "auto" if max(m.shape) > 3 * min(m.shape) else "equal"
        im = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest", aspect=aspect)
        ax.set_title(_title(panels[k].get("label", "")), fontsize=10, y=1.0)
        if m.shape[0] <= 10 and m.shape[1] <= 10:
            ax.set_xticks(range(m.shape[1]))
            ax.set_yticks(range(m.shape[0]))
            if m.size <= 36:
                _annotate(ax, m, im)
        ax.tick_params(labelsize=8)
        _spines_out_of_layout(ax)
    fig.colorbar(im, ax=axes, shrink=0.85)
    if spec.get("title"):
        fig.suptitle(_title(spec["title"]), fontsize=11)
    return fig


def _annotate(ax, m, im) -> None:
    """Each cell's value, centred in the cell, in black or white by the cell's colour. Only the
    first and last columns' values take part in the constrained layout (one wider than its cell
    may reach past the panel's side); an inner column's value lies inside the panel, and left out
    it saves the layout the extents of most of the texts of the figure."""
    rgba = im.cmap(im.norm(m))
    last = m.shape[1] - 1
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            v = m[i, j]
            r, g, b, _ = rgba[i, j] if math.isfinite(v) else (1, 1, 1, 1)
            dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
            t = ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
            if 0 < j < last:
                t.set_in_layout(False)
