"""Archive of full-profile runs: the evidence at the papers' sizes, kept with the project.

The full profile (``python -m verify ... --profile full``) takes minutes to hours per check,
so its results are not recomputed by the test suite. This module files the records of such
runs under ``docs/full_profile/`` (one JSON file per check and variant) and renders them as
the documentation page *Full-profile runs* (with the runs' figures).

Commands
--------
::

    python -m verify linear_attention.separate.torch_training --profile full --report out/
    python -m verify.archive out/ [--tag R1] [--to docs/full_profile] [--replace]

Each record keeps the check's full result (measured, predicted, discrepancy, tolerance,
criterion, negative controls, details, seconds), its figures from the report (copied to
``figures/``) and the run's metadata (date, seed, device, CPU count, git commit, library
versions). Quick-profile results are refused.

``--tag`` names a variant of one check (e.g. the rank selected by ``ATTN_S_TORCH_RANKS``);
the record is ``<check id>.<tag>.json``, so a tag is letters, digits and ``_.-`` (at most
40). Records filed before this rule may carry a tag with ``=`` or ``,`` (``R=1``, in
``<id>.R1.json``); such a record can be refiled under its own tag, and no other tag may
take its file.

A later run of the same check and tag replaces the earlier record and its figures, except
that replacing a record with an older run (by the run's date) or a passing record with a
failing run needs ``--replace``. Filing is all or nothing: every report folder given is
read and checked first (an ``error: ...`` line naming the file and the problem, exit
status 2, the archive untouched); then the records and figures are written to a staging
folder inside the archive and renamed into place, each record's figures before the
record, its old figures removed last.
"""

from __future__ import annotations

import datetime as _dt
import glob
import json
import math
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ARCHIVE_DIR", "archive", "compact", "load", "page"]

#: Where the records live (relative to the repository root).
ARCHIVE_DIR = Path(__file__).resolve().parent.parent / "docs" / "full_profile"
_META_KEYS = ("date", "profile", "seed", "device", "cpu_count", "cuda_device", "toolkit",
              "commit", "versions")
_COMMIT = re.compile(r"^[0-9a-f]{7,40}(\+dirty)?$")
_TAG = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
_LEGACY_TAG = re.compile(r"^[A-Za-z0-9=,._-]{1,40}$")
_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_STATUSES = ("passed", "failed", "skipped")


def _file_name(id: str, tag: str | None) -> str:
    """``<id>[.<tag>].json``; a legacy tag drops ``=`` and turns ``,`` into ``-``."""
    safe = "" if tag is None else "." + tag.replace("=", "").replace(",", "-")
    return f"{id}{safe}.json"


@dataclass
class _Filing:
    """One record to file: where it goes, what it holds, its figures, what it replaces."""

    target: Path
    record: dict
    figures: list[tuple[Path, str]] = field(default_factory=list)  # (source, name in figures/)
    stale: list[str] = field(default_factory=list)  # old figure names no longer used
    source: str = ""


def archive(report_dir, *, to=ARCHIVE_DIR, tag: str | None = None,
            commit: str | None = None, replace: bool = False) -> list[Path]:
    """File every full-profile result of ``report_dir/results.json`` under ``to``.

    Parameters
    ----------
    report_dir : path
        A report folder written by ``python -m verify ... --profile full --report DIR``.
    to : path
        Archive folder (created if missing).
    tag : str, optional
        Variant name (letters, digits, ``_.-``; at most 40 characters), e.g. ``R1``. A
        record filed under a legacy tag such as ``R=1`` can be refiled under that tag.
    commit : str, optional
        The git commit the run was made from; replaces the report's own ``commit`` (for
        reports written before reports recorded it).
    replace : bool
        Allow replacing a record with an older run or a passing record with a failing run.

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    ValueError
        Naming the parameter, the file and the problem; the archive is then untouched.
    """
    return _file_all([_plan(report_dir, to=to, tag=tag, commit=commit, replace=replace)], to)


# -- reading and checking a report --------------------------------------------------
def _plan(report_dir, *, to=ARCHIVE_DIR, tag: str | None = None, commit: str | None = None,
         replace: bool = False) -> list[_Filing]:
    """Read and check ``report_dir`` against the archive ``to``; what filing it would write.

    Writes nothing. Raises ``ValueError`` for anything that would file a bad record or
    lose a filed one.
    """
    if tag is not None and not _LEGACY_TAG.match(tag):
        raise ValueError(f"tag: expected letters, digits and '_.-' (at most 40), got {tag!r}")
    if commit is not None and not _COMMIT.match(commit):
        raise ValueError(f"commit: expected a hexadecimal git commit, got {commit!r}")
    out_dir = _archive_dir(to)
    path = Path(report_dir) / "results.json"
    meta, results = _read_report(path, report_dir)
    if commit is not None:
        meta["commit"] = commit
    filings = []
    for res in results:
        target = out_dir / _file_name(res["id"], tag)
        old = _read_record(target)
        _check_tag(tag, res["id"], target, old)
        record = {"id": res["id"], "tag": tag,
                  "metadata": {k: meta[k] for k in _META_KEYS if k in meta},
                  "figures": [], "result": res}
        if old is not None and not replace:
            _check_replacement(path, record, target, old)
        filings.append(_with_figures(record, target, Path(report_dir), old, str(path)))
    return filings


def _archive_dir(to) -> Path:
    """The archive folder ``to``; it must be a folder, or missing under a folder."""
    out_dir = Path(to)
    probe = out_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ValueError(f"to: {str(probe)!r} is a file, not a folder")
    return out_dir


def _read_report(path: Path, report_dir) -> tuple[dict, list[dict]]:
    """The metadata and the results to file (skipped ones left out) of a results.json."""
    if not path.is_file():
        raise ValueError(f"report_dir: no results.json in {report_dir}")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"report_dir: {path} is not JSON ({exc.msg} at line {exc.lineno}, "
                         f"column {exc.colno})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"report_dir: cannot read {path} ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"report_dir: {path} holds a JSON {type(doc).__name__}, expected an "
                         "object with 'metadata' and 'results'")
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    if meta.get("profile") != "full":
        raise ValueError(f"report_dir: {report_dir} holds a {meta.get('profile')!r} profile run; "
                         "only full-profile runs are archived")
    where = _non_finite(meta, "metadata")
    if where:
        raise ValueError(f"report_dir: {path}: {where}")
    results = doc.get("results")
    if not isinstance(results, list) or not results:
        raise ValueError(f"report_dir: {path} holds no results (the 'results' list is "
                         f"{'empty' if results == [] else 'missing'}); nothing to file")
    seen: dict[str, int] = {}
    for k, res in enumerate(results):
        _check_result(path, k, res)
        if res["status"] != "skipped" and res["id"] in seen:
            raise ValueError(f"report_dir: {path}: results {seen[res['id']]} and {k} are both "
                             f"{res['id']!r} (a run over several seeds?); file one run per check")
        seen.setdefault(res["id"], k)
    kept = [res for res in results if res["status"] != "skipped"]
    if not kept:
        raise ValueError(f"report_dir: {path} holds only skipped results; nothing to file")
    return dict(meta), kept


def _check_result(path: Path, k: int, res) -> None:
    """One result of a results.json: an object with a usable id, a status and strict numbers."""
    if not isinstance(res, dict):
        raise ValueError(f"report_dir: {path}: result {k} is a JSON {type(res).__name__}, "
                         "expected an object")
    rid = res.get("id")
    if not isinstance(rid, str) or not _ID.match(rid):
        problem = "has no 'id'" if rid is None else f"has the id {rid!r}, not a check id"
        raise ValueError(f"report_dir: {path}: result {k} {problem}")
    if res.get("status") not in _STATUSES:
        raise ValueError(f"report_dir: {path}: result {rid!r} has the status "
                         f"{res.get('status')!r}, expected one of {_STATUSES}")
    where = _non_finite(res, f"result {rid!r}")
    if where:
        raise ValueError(f"report_dir: {path}: {where}")
    if res["status"] == "passed":
        for key in ("discrepancy", "tolerance"):
            v = res.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"report_dir: {path}: result {rid!r} is marked passed but its "
                                 f"{key} is {v!r}, not a finite number")


def _non_finite(value, where: str) -> str | None:
    """Where ``value`` holds a NaN or infinite float (not valid JSON), in words, or None.

    ``python -m verify`` writes non-finite numbers as ``null`` (listed in the record's
    ``nonfinite`` field; reports before results.json schema version 2 wrote strings such as
    ``"nan"``); a bare ``NaN`` or ``Infinity`` comes from an edited or foreign file.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where} is {value} (NaN and infinities are not valid JSON; write them as strings)"
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, list) else ())
    for key, v in items:
        found = _non_finite(v, f"{where}[{key!r}]" if isinstance(key, str) else f"{where}[{key}]")
        if found:
            return found
    return None


# -- checking against the archive ---------------------------------------------------
def _read_record(target: Path) -> dict | None:
    """The record filed at ``target``, or None; an unreadable file is refused, not replaced."""
    if not target.exists():
        return None
    try:
        rec = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"to: {target} is not a readable record ({exc}); move it away first, "
                         "nothing was filed") from None
    if not isinstance(rec, dict):
        raise ValueError(f"to: {target} is not a record (a JSON {type(rec).__name__}); move it "
                         "away first, nothing was filed")
    return rec


def _check_tag(tag: str | None, rid: str, target: Path, old: dict | None) -> None:
    """Refuse a tag that is not a file-name tag (unless it is the legacy tag already filed
    there) and a tag whose file holds the record of another tag."""
    old_tag = None if old is None else old.get("tag")
    if tag is not None and not _TAG.match(tag) and old_tag != tag:
        suggestion = tag.replace("=", "").replace(",", "-")
        raise ValueError(f"tag: {tag!r} is not allowed: a tag is letters, digits and '_.-' "
                         f"(the record's file name is <id>.<tag>.json); use {suggestion!r}")
    if old is not None and old_tag != tag:
        shown = "no tag" if old_tag is None else f"the tag {old_tag!r}"
        raise ValueError(f"tag: {target} holds the record of {rid!r} with {shown}, and tag "
                         f"{tag!r} maps to the same file; refile it with --tag {old_tag} or "
                         "choose another tag")


def _date(meta: dict):
    """The run's date as an aware datetime, or None when missing or unreadable."""
    try:
        when = _dt.datetime.fromisoformat(str(meta.get("date")))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)


def _check_replacement(path: Path, record: dict, target: Path, old: dict) -> None:
    """Refuse (without ``replace``) an older run, or a failing run over a passing record."""
    new_date, old_date = _date(record["metadata"]), _date(old.get("metadata") or {})
    hint = "; pass --replace to replace it"
    if new_date is None or old_date is None:
        raise ValueError(f"report_dir: {path}: cannot tell whether the run is newer than the "
                         f"filed record {target} (a date is missing){hint}")
    if new_date < old_date:
        raise ValueError(f"report_dir: {path} is an older run ({record['metadata']['date']}) "
                         f"than the filed record {target} ({old['metadata']['date']}){hint}")
    old_status = (old.get("result") or {}).get("status")
    if old_status == "passed" and record["result"]["status"] != "passed":
        raise ValueError(f"report_dir: {path}: {record['id']!r} failed in this run, and would "
                         f"replace the passing record {target}{hint}")


def _with_figures(record: dict, target: Path, report_dir: Path, old: dict | None,
                  source: str) -> _Filing:
    """The filing of ``record``: its figures from the report and the old ones it retires.

    Figures ``figures/<id>-<name>.png`` of the report become ``figures/<stem>-<name>.png``
    of the archive (``<stem>`` is the record's file name without ``.json``).
    """
    rid = record["id"]
    stem = target.name[:-len(".json")]
    filing = _Filing(target, record, source=source)
    for src in sorted((report_dir / "figures").glob(f"{glob.escape(rid)}-*.png")):
        name = stem + src.name[len(rid):]
        filing.figures.append((src, name))
        record["figures"].append(f"figures/{name}")
    fig_dir = target.parent / "figures"
    old_names = {p.name for p in fig_dir.glob(f"{glob.escape(stem)}-*.png")}
    old_names |= {Path(f).name for f in (old or {}).get("figures", []) if isinstance(f, str)}
    filing.stale = sorted(old_names - {name for _, name in filing.figures})
    return filing


# -- writing ------------------------------------------------------------------------
def _file_all(plans: list[list[_Filing]], to=ARCHIVE_DIR) -> list[Path]:
    """Write the filings of :func:`_plan` into the archive ``to``; returns the files written.

    Two filings for one file are refused before anything is written. Records and figures
    are staged inside the archive, then renamed into place with Ctrl-C held: each record's
    figures, then the record, then its stale figures removed.
    """
    from .report import sigint_deferred

    filings = [f for p in plans for f in p]
    by_target: dict[Path, _Filing] = {}
    for f in filings:
        if f.target in by_target:
            raise ValueError(f"report_dir: {by_target[f.target].source} and {f.source} would "
                             f"both file {f.target}; file them one at a time")
        by_target[f.target] = f
    out_dir = _archive_dir(to)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".filing-", dir=out_dir))
    except OSError as exc:
        raise ValueError(f"to: cannot write in {out_dir} ({exc.strerror or exc})") from None
    try:
        _stage(filings, staging)
        with sigint_deferred():
            return _move_into_place(filings, staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _stage(filings: list[_Filing], staging: Path) -> None:
    """Copy every figure and write every record into ``staging``."""
    (staging / "figures").mkdir()
    for f in filings:
        for src, name in f.figures:
            shutil.copyfile(src, staging / "figures" / name)
        text = json.dumps(f.record, indent=1, allow_nan=False) + "\n"
        (staging / f.target.name).write_text(text, encoding="utf-8")


def _move_into_place(filings: list[_Filing], staging: Path, out_dir: Path) -> list[Path]:
    """Rename the staged files into the archive: per record its figures, the record, then
    its stale figures removed; returns the files written."""
    written = []
    fig_dir = out_dir / "figures"
    for f in filings:
        if f.figures:
            fig_dir.mkdir(exist_ok=True)
        for _, name in f.figures:
            os.replace(staging / "figures" / name, fig_dir / name)
            written.append(fig_dir / name)
        os.replace(staging / f.target.name, f.target)
        written.append(f.target)
        for name in f.stale:
            (fig_dir / name).unlink(missing_ok=True)
    return written


def load(path=ARCHIVE_DIR) -> list[dict]:
    """Every archived record under ``path``, sorted by check id and tag."""
    records = [json.loads(p.read_text()) for p in sorted(Path(path).glob("*.json"))]
    return sorted(records, key=lambda r: (r["id"], r.get("tag") or ""))


def _md(text) -> str:
    """Plain text for a Markdown paragraph or table cell (no emphasis, math or cell breaks)."""
    return re.sub(r"([\\`*_{}\[\]<>|$#])", r"\\\1", str(text))


def _num(x) -> str:
    if x is None:  # written for a non-finite number (the record's "nonfinite" field says which)
        return "n/a"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, (int, float)):
        return f"{x:.4g}" if math.isfinite(x) else str(x)
    return str(x)


def compact(value, digits: int = 6):
    """Round floats (also inside lists and dicts) to ``digits`` significant digits for display."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, list):
        return [compact(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: compact(v, digits) for k, v in value.items()}
    return value


def _flat(value) -> bool:
    scalar = (int, float, str, bool, type(None))
    return isinstance(value, scalar) or (isinstance(value, list)
                                         and all(isinstance(v, scalar) for v in value))


def _outline(value, indent: int = 0) -> list[str]:
    """Nested dicts/lists as indented lines; scalars and lists of scalars on one line."""
    pad = " " * indent
    if _flat(value):
        return [pad + json.dumps(compact(value))]
    lines = []
    if isinstance(value, dict):
        for k, v in value.items():
            if _flat(v):
                lines.append(f"{pad}{k}: {json.dumps(compact(v))}")
            else:
                lines += [f"{pad}{k}:"] + _outline(v, indent + 2)
        return lines
    for v in value:
        sub = _outline(v, indent + 2)
        lines.append(pad + "- " + sub[0].lstrip())
        lines += sub[1:]
    return lines


def page(path=ARCHIVE_DIR, rel: str = "../full_profile") -> str:
    """The Markdown page listing the archived full-profile runs.

    ``rel`` is the archive folder as seen from the page (the site writes the page to
    ``docs/_generated/``); figures are linked through it.
    """
    from theory.papers import PAPERS
    from verify.report import paper_heading

    records = load(path)
    out = ["# Full-profile runs", "",
           "The full profile runs each check at the papers' sizes (minutes to hours per check, "
           "so the test suite does not rerun it). These are the recorded runs, filed with "
           "`python -m verify.archive REPORT_DIR [--tag TAG]`; rerun one with "
           "`python -m verify <check id> --profile full --seed <seed>`.", ""]
    if not records:
        out += ["No full-profile run is archived yet.", ""]
        return "\n".join(out)
    topics = [t for t in PAPERS if any(r["id"].split(".", 1)[0] == t for r in records)]
    for topic in topics:
        group = [r for r in records if r["id"].split(".", 1)[0] == topic]
        out += [f"## {paper_heading(group[0]['id'])}", "",
                "| check | variant | result | discrepancy | tolerance | seconds | device | date |",
                "|---|---|---|---|---|---|---|---|"]
        for r in group:
            res, meta = r["result"], r["metadata"]
            dev = f"{meta.get('device', '?')} ({meta.get('cpu_count', '?')} CPU cores)"
            out.append(f"| `{r['id']}` | {r.get('tag') or ''} | {res.get('status')} | "
                       f"{_num(res.get('discrepancy'))} | {_num(res.get('tolerance'))} | "
                       f"{_num(res.get('seconds'))} | {dev} | {meta.get('date', '?')[:10]} |")
        out.append("")
        for r in group:
            res, meta = r["result"], r["metadata"]
            head = f"`{r['id']}`" + (f" ({r['tag']})" if r.get("tag") else "")
            out += [f"### {head}", "", f"{_md(res.get('title', ''))}.", "",
                    f"Seed {meta.get('seed')}, {meta.get('device')}, torch "
                    f"{meta.get('versions', {}).get('torch', '-')}, {meta.get('date')}, "
                    f"commit {str(meta.get('commit') or 'not recorded')[:12]}.", "",
                    f"**Criterion.** {_md(res.get('criterion', ''))}", ""]
            if res.get("error"):
                out += [f"**Error.** {_md(res['error'])}", ""]
            controls = res.get("controls") or []
            if controls:
                out += ["| negative control | discrepancy | tolerance | rejected |",
                        "|---|---|---|---|"]
                out += [f"| {_md(c['name'])} | {_num(c['discrepancy'])} | {_num(c['tolerance'])} | "
                        f"{c['rejected']} |" for c in controls]
                out.append("")
            for fig in r.get("figures", []):
                out += [f"![{r['id']}]({rel}/{fig})", ""]
            shown = {"measured": res.get("measured"), "predicted": res.get("predicted")}
            out += ["```text", *_outline(shown), "```", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    """``python -m verify.archive``: 0 when filed, 2 with one ``error: ...`` line otherwise."""
    from .cli import OneLineParser

    parser = OneLineParser(prog="python -m verify.archive",
                           description="File full-profile results under docs/full_profile.",
                           missing="report_dir: give at least one report folder")
    parser.add_argument("report_dir", nargs="+", help="report folders (with results.json)")
    parser.add_argument("--tag", default=None,
                        help="variant name: letters, digits and '_.-', e.g. R1")
    parser.add_argument("--commit", default=None,
                        help="git commit of the run (for reports that do not record one)")
    parser.add_argument("--to", default=str(ARCHIVE_DIR), help="archive folder")
    parser.add_argument("--replace", action="store_true",
                        help="replace a record even with an older run or a failing one")
    try:
        args = parser.parse_args(argv)
        plans = [_plan(d, to=args.to, tag=args.tag, commit=args.commit, replace=args.replace)
                 for d in args.report_dir]
        for p in _file_all(plans, args.to):
            print(p)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: to: cannot write {args.to} ({err})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing more was filed", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
