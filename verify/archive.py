"""Archive of full-profile runs: the evidence at the papers' sizes, kept with the project.

The full profile (``python -m verify ... --profile full``) takes minutes to hours per check,
so its results are not recomputed by the test suite. This module files the records of such
runs under ``docs/full_profile/`` (one JSON file per check and variant) and renders them as
the documentation page *Full-profile runs* (with the runs' figures).

Commands
--------
::

    python -m verify linear_attention.separate.torch_training --profile full --report out/
    python -m verify.archive out/ [--tag R=1] [--to docs/full_profile]

Each record keeps the check's full result (measured, predicted, discrepancy, tolerance,
criterion, negative controls, details, seconds), its figures from the report (copied to
``figures/``) and the run's metadata (date, seed, device, CPU count, git commit, library
versions). ``--tag`` names a variant of one check (e.g. the rank selected by
``ATTN_S_TORCH_RANKS``); a later run of the same check and tag replaces the earlier record
and its figures. Quick-profile results are refused.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import re
import shutil
import sys
from pathlib import Path

__all__ = ["ARCHIVE_DIR", "archive", "compact", "load", "page"]

#: Where the records live (relative to the repository root).
ARCHIVE_DIR = Path(__file__).resolve().parent.parent / "docs" / "full_profile"
_META_KEYS = ("date", "profile", "seed", "device", "cpu_count", "cuda_device", "toolkit",
              "commit", "versions")
_COMMIT = re.compile(r"^[0-9a-f]{7,40}(\+dirty)?$")
_TAG = re.compile(r"^[A-Za-z0-9=,._-]{1,40}$")


def _file_name(id: str, tag: str | None) -> str:
    safe = "" if tag is None else "." + tag.replace("=", "").replace(",", "-")
    return f"{id}{safe}.json"


def archive(report_dir, *, to=ARCHIVE_DIR, tag: str | None = None,
            commit: str | None = None) -> list[Path]:
    """File every full-profile result of ``report_dir/results.json`` under ``to``.

    Parameters
    ----------
    report_dir : path
        A report folder written by ``python -m verify ... --profile full --report DIR``.
    to : path
        Archive folder (created if missing).
    tag : str, optional
        Variant name (letters, digits, ``=,._-``; at most 40 characters), e.g. ``R=1``.
    commit : str, optional
        The git commit the run was made from; replaces the report's own ``commit`` (for
        reports written before reports recorded it).

    Returns
    -------
    list of Path
        The files written.
    """
    path = Path(report_dir) / "results.json"
    if not path.is_file():
        raise ValueError(f"report_dir: no results.json in {report_dir}")
    if tag is not None and not _TAG.match(tag):
        raise ValueError(f"tag: expected letters, digits and '=,._-' (at most 40), got {tag!r}")
    if commit is not None and not _COMMIT.match(commit):
        raise ValueError(f"commit: expected a hexadecimal git commit, got {commit!r}")
    doc = json.loads(path.read_text())
    meta = dict(doc.get("metadata", {}))
    if commit is not None:
        meta["commit"] = commit
    if meta.get("profile") != "full":
        raise ValueError(f"report_dir: {report_dir} holds a {meta.get('profile')!r} profile run; "
                         "only full-profile runs are archived")
    out_dir = Path(to)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for res in doc.get("results", []):
        if res.get("status") == "skipped":
            continue
        target = out_dir / _file_name(res["id"], tag)
        stem = target.name[:-len(".json")]
        # the record's figures: figures/<id>-<name>.png of the report -> figures/<stem>-<name>.png
        fig_dir = out_dir / "figures"
        for old in fig_dir.glob(f"{glob.escape(stem)}-*.png"):
            old.unlink()
        figures = []
        for src in sorted((Path(report_dir) / "figures").glob(f"{glob.escape(res['id'])}-*.png")):
            fig_dir.mkdir(exist_ok=True)
            dst = fig_dir / (stem + src.name[len(res["id"]):])
            shutil.copyfile(src, dst)
            figures.append(f"figures/{dst.name}")
            written.append(dst)
        record = {"id": res["id"], "tag": tag,
                  "metadata": {k: meta[k] for k in _META_KEYS if k in meta},
                  "figures": figures, "result": res}
        target.write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")
        written.append(target)
    return written


def load(path=ARCHIVE_DIR) -> list[dict]:
    """Every archived record under ``path``, sorted by check id and tag."""
    records = [json.loads(p.read_text()) for p in sorted(Path(path).glob("*.json"))]
    return sorted(records, key=lambda r: (r["id"], r.get("tag") or ""))


def _md(text) -> str:
    """Plain text for a Markdown paragraph or table cell (no emphasis, math or cell breaks)."""
    return re.sub(r"([\\`*_{}\[\]<>|$#])", r"\\\1", str(text))


def _num(x) -> str:
    if isinstance(x, bool) or x is None:
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
    parser = argparse.ArgumentParser(prog="python -m verify.archive",
                                     description="File full-profile results under docs/full_profile.")
    parser.add_argument("report_dir", nargs="+", help="report folders (with results.json)")
    parser.add_argument("--tag", default=None, help="variant name, e.g. R=1")
    parser.add_argument("--commit", default=None,
                        help="git commit of the run (for reports that do not record one)")
    parser.add_argument("--to", default=str(ARCHIVE_DIR), help="archive folder")
    args = parser.parse_args(argv)
    try:
        for d in args.report_dir:
            for p in archive(d, to=args.to, tag=args.tag, commit=args.commit):
                print(p)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
