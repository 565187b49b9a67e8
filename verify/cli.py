"""Run the registered checks of the closed forms and write a report.

Commands
--------
list
    One line per check: id, method, the closed forms it covers.
all
    Run every check.
run ID [ID ...]
    Run the named checks. ``run`` may be left out: ``python -m verify ID [ID ...]``.
    An id prefix such as ``linear_attention.merged`` selects every check under it.
settings ID
    The check's named settings: name, kind, quick and full value, allowed range, doc.
sweep ID --grid NAME=V1,V2,... [--grid NAME2=...]
    Run one check at every grid point (and seed, with ``--seeds``) and add ``sweep.csv``,
    ``sweep.json`` and the validity map ``figures/sweep-validity.png`` (discrepancy /
    tolerance over the grid; 1 is the pass boundary) to the report (:mod:`verify.sweep`).
``--set NAME=VALUE``
    Run with a setting changed (repeatable), e.g. ``--set N=200 --set spectrum=power:1.5``;
    applied to the selected checks that declare it. Every result records the settings it ran
    with.
``--covers PREFIX``
    Instead of ids: every check covering a closed form under ``PREFIX`` (whatever the
    check's own id), e.g. ``--covers preconditioned_gd.multi_layer`` also selects the torch
    checks of those records. With ``list``, lists them.

Each run prints a results table (id, pass/FAIL, discrepancy, tolerance, seconds) and a
summary line, and writes ``results.json``, ``report.md`` and figures to ``--report``.

``--seeds 0-19`` (or ``0,3,5`` or ``2-4,9``) runs the selected checks once per seed and adds a
pass-rate table per check (passed/run, the seeds that failed, the worst discrepancy/tolerance);
``results.json`` holds every (check, seed) result. ``--seed`` and ``--seeds`` do not go together.

``--figures first`` (the default) draws the figures of the first (lowest) seed's runs only (each check, and
each grid point of a sweep, once), as PNG and SVG; ``--figures all`` draws every run's, ``--figures
none`` none. Every run's figure data is written as CSV beside them, and the results store keeps
every figure, so ``--figures all --resume`` draws the rest later without running anything again.

Where it runs: in this process, one run after another (the default); ``--workers N`` on a local
Dask cluster of N worker processes; ``--scheduler ADDRESS`` on an existing Dask cluster (see the
README). Each (check, seed) is one task; the same seed gives the same result either way.

Every finished run is written at once to a results store (SQLite): ``--store PATH``, by default
``results.sqlite`` in the report folder. ``--resume`` takes the runs already in the store
(same check, settings, seed, profile, device and toolkit commit) and runs only the rest, so an
interrupted run goes on where it stopped.

The report folder is checked before the first check runs. The report is written into a
staging folder next to it and moved into place when complete, so a previous report is
replaced only by a finished one. A folder that holds anything but a previous report is
refused unless ``--overwrite`` is given (which replaces only ``results.json``,
``report.md`` and ``figures/``). Ctrl-C stops the run: the checks that finished go to a
report marked ``PARTIAL (interrupted)``, written into the folder only if it holds no
complete report, else into ``<folder>-partial``.

Exit status: 0 when every check passed (skipped checks do not count), 1 when any
failed, 2 for a usage error (one ``error: ...`` line), 130 when interrupted.

Examples
--------
::

    python -m verify list
    python -m verify all --profile quick --seed 0
    python -m verify linear_attention.merged --report out/
    python -m verify localization.softmax --seeds 0-19 --report sweep/
    python -m verify --covers preconditioned_gd.multi_layer.optimal_steps --report out/
    python -m verify all --profile full --device cuda
    python -m verify all --seeds 0-19 --workers 2 --report seeds/
    python -m verify settings localization.rho.mc_gaussian
    python -m verify linear_attention.merged.mc_global_min --set N=31 --set spectrum=white
    python -m verify sweep localization.rho.mc_gaussian --grid d=2,8,32,128 --report rho-d/
    python -m verify all --seeds 0-19 --workers 2 --report seeds/ --resume   # after Ctrl-C
    python -m verify all --profile full --scheduler tcp://10.0.0.5:8786 --store runs.sqlite
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import time
from typing import Callable, Iterable

from .registry import CheckResult, PROFILES, all_checks
from .report import (FIGURE_CHOICES, STORE_FILES, ReportFolder, draws_figures, format_seeds,
                     partial_destination, pass_rates, rate_text, sigint_deferred, status_of, worst_text,
                     write_files)

__all__ = ["main", "select", "parse_seeds", "run_checks"]

_COMMANDS = ("list", "all", "run", "settings", "sweep")
#: The results store's file in a report folder (when no --store is given).
STORE_NAME = STORE_FILES[0]
#: The most seeds one ``--seeds`` may name.
MAX_SEEDS = 10_000


class _UsageError(ValueError):
    """Bad command-line input; printed as one ``error: ...`` line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose mistakes raise ``ValueError`` with one line naming the option
    (no usage block); ``missing`` words the message for missing positional arguments."""

    def __init__(self, *args, missing: str = "a required argument is missing", **kw):
        super().__init__(*args, **kw)
        self.missing = missing

    def error(self, message: str):
        """argparse's hook for a mistake: raise instead of printing usage and exiting."""
        raise _UsageError(one_line(message, self.missing))


def one_line(message: str, missing: str) -> str:
    """An argparse message as ``OPTION: problem`` (or ``missing`` for a missing argument)."""
    message = " ".join(message.split())
    m = re.match(r"argument ([^:/\s]+)(?:/\S+)?: (.*)", message)
    if m:
        return f"{m[1]}: {m[2]}"
    if message.startswith("the following arguments are required"):
        return missing
    m = re.match(r"unrecognized arguments: (\S+)", message)
    if m:
        word = m[1]
        if word.startswith("-"):
            return f"{word.split('=', 1)[0]}: unknown option (see --help)"
        return f"unexpected argument {word!r} (see --help)"
    return message


def _seed_arg(text: str) -> int:
    """``--seed``: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def parse_seeds(spec: str) -> list[int]:
    """The seeds of a ``--seeds`` spec, ascending and without repeats.

    ``"0-19"`` (a range, both ends included), ``"0,3,5"``, ``"2-4,9"``; spaces around the
    items are allowed. An empty spec or item, a descending range, a negative seed or
    anything but integers raises ``ValueError`` naming ``--seeds``; so does a spec naming
    more than :data:`MAX_SEEDS` seeds.
    """
    text = spec.strip()
    if not text:
        raise ValueError("--seeds: empty; give seeds such as 0-19, 0,3,5 or 2-4,9")
    seeds: set[int] = set()
    for item in (part.strip() for part in text.split(",")):
        lo, hi = _seed_item(item, spec)
        if hi - lo + 1 + len(seeds) > MAX_SEEDS:
            raise ValueError(f"--seeds: {spec!r} names more than {MAX_SEEDS} seeds")
        seeds.update(range(lo, hi + 1))
    return sorted(seeds)


def _seed_item(item: str, spec: str) -> tuple[int, int]:
    """One item of a ``--seeds`` spec as the range (first, last)."""
    if not item:
        raise ValueError(f"--seeds: empty item in {spec!r}")
    m = re.fullmatch(r"([0-9]+)(?:\s*-\s*([0-9]+))?", item)
    if not m:
        if item.startswith("-") or re.fullmatch(r"[0-9]+\s*-\s*-.*", item):
            raise ValueError(f"--seeds: seeds must be >= 0, got {item!r}")
        raise ValueError(f"--seeds: expected integers or ranges such as 2-4, got {item!r}")
    try:
        lo = int(m[1])
        hi = int(m[2]) if m[2] is not None else lo
    except ValueError:  # more digits than int() takes
        raise ValueError(f"--seeds: {item!r} is not an integer seed") from None
    if hi < lo:
        raise ValueError(f"--seeds: descending range {item!r} (write {hi}-{lo})")
    return lo, hi


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        missing="command: missing; give list, all, run or a check id "
                "(see 'python -m verify --help')",
        prog="python -m verify",
        usage="python -m verify [options] {list,all,run} [ID ...]\n"
              "       python -m verify [options] ID [ID ...]",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("command", metavar="COMMAND", nargs="?", default=None,
                   help="list, all, run, or a check id (may be left out with --covers)")
    p.add_argument("ids", metavar="ID", nargs="*",
                   help="check ids or id prefixes (with 'run' or on their own)")
    p.add_argument("--covers", metavar="PREFIX", action="append", default=None,
                   help="select every check covering a closed form under PREFIX "
                        "(e.g. preconditioned_gd.multi_layer); repeatable; with list, lists them")
    p.add_argument("--profile", choices=PROFILES, default="quick",
                   help="quick: minutes on a laptop (default); full: the papers' sizes")
    p.add_argument("--seed", type=_seed_arg, default=None, help="run seed (default 0)")
    p.add_argument("--seeds", metavar="SPEC", default=None,
                   help="run once per seed: 0-19, 0,3,5 or 2-4,9 (not with --seed)")
    p.add_argument("--report", metavar="DIR", default="verify-report",
                   help="report folder (default verify-report; '' writes no report)")
    p.add_argument("--overwrite", action="store_true",
                   help="write the report into a folder that holds other files too")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="device for torch checks (default cpu)")
    p.add_argument("--quiet", action="store_true", help="no progress output on stderr")
    p.add_argument("--workers", type=_workers_arg, default=None, metavar="N",
                   help="run on a local Dask cluster of N worker processes")
    p.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="run on an existing Dask cluster (e.g. tcp://host:8786)")
    p.add_argument("--store", metavar="PATH", default=None,
                   help="results store (SQLite; default: results.sqlite in the report folder)")
    p.add_argument("--resume", action="store_true",
                   help="reuse the runs already in the store; run only the rest")
    p.add_argument("--figures", choices=FIGURE_CHOICES, default="first",
                   help="which runs' figures the report draws: first (default: the first, lowest, seed's), all, "
                        "or none; every run's figure data is written as CSV")
    p.add_argument("--set", dest="assignments", metavar="NAME=VALUE", action="append", default=[],
                   help="change a setting of the selected checks (repeatable; see 'settings ID')")
    p.add_argument("--grid", dest="grids", metavar="NAME=V1,V2,...", action="append", default=[],
                   help="with sweep: the values of one setting (repeatable)")
    p.add_argument("--json", action="store_true",
                   help="with list: a JSON list of {id, method, title, covers, aliases, needs, settings}")
    from theory.cli import VersionAction

    p.add_argument("--version", action=VersionAction, help="print the toolkit's version and exit")
    return p


def _workers_arg(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return n


# -- selection ----------------------------------------------------------------------
def registered_checks() -> list:
    """Every registered check, after importing all modules of :mod:`verify.checks`."""
    importlib.import_module("verify.checks")
    return all_checks()


def select(patterns: Iterable[str], registered: list | None = None) -> list:
    """The checks named by ``patterns``, in registration order, without repeats.

    A pattern selects the check with that id, else every check whose id starts with
    ``pattern + "."`` (a topic such as ``linear_attention.merged``), else every check
    whose id starts with ``pattern``; failing those, the same on the checks' former ids
    (``aliases``), with a note naming the current id. A pattern matching nothing is a
    usage error.
    """
    registered = registered_checks() if registered is None else registered
    chosen: dict[str, object] = {}
    for pat in patterns:
        if not pat:
            raise _UsageError("id: empty check id")
        hits = _matching(pat, registered, lambda c: (c.id,))
        if not hits:  # a former id or prefix: the checks that had it, named as they are now
            hits = _matching(pat, registered, lambda c: c.aliases)
            for c in hits:
                print(f"note: {pat!r} selects {c.id!r} (former id: "
                      f"{', '.join(a for a in c.aliases if a.startswith(pat))})", file=sys.stderr)
        if not hits:
            raise _UsageError(f"id: no check matches {pat!r} (see 'python -m verify list')")
        for c in hits:
            chosen.setdefault(c.id, c)
    order = {c.id: i for i, c in enumerate(registered)}
    return sorted(chosen.values(), key=lambda c: order[c.id])


def covering(prefixes: Iterable[str], registered: list | None = None) -> list:
    """The checks covering a closed form under any of ``prefixes`` (an id, or a prefix such as
    ``preconditioned_gd.multi_layer``: the ids equal to it or under ``prefix + "."``), in
    registration order; a prefix that names no registered closed form, or that no check
    covers, is a usage error."""
    import theory

    registered = registered_checks() if registered is None else registered
    ids = theory.ids()
    chosen = []
    for pre in prefixes:
        if not pre:
            raise _UsageError("--covers: empty prefix")
        under = {i for i in ids if i == pre or i.startswith(pre + ".")}
        if not under:
            raise _UsageError(f"--covers: no closed form under {pre!r} (see 'python -m theory list')")
        hits = [c for c in registered if under & set(c.covers)]
        if not hits:
            raise _UsageError(f"--covers: no check covers the closed forms under {pre!r}")
        chosen += [c for c in hits if c not in chosen]
    order = {c.id: i for i, c in enumerate(registered)}
    return sorted(chosen, key=lambda c: order[c.id])


def _matching(pat: str, registered: list, names) -> list:
    """The checks with a name (``names(check)``) equal to ``pat``, else under ``pat + "."``,
    else starting with ``pat``."""
    for hit in (lambda n: n == pat, lambda n: n.startswith(pat + "."), lambda n: n.startswith(pat)):
        found = [c for c in registered if any(hit(n) for n in names(c))]
        if found:
            return found
    return []


def _is_check_pattern(word: str, registered: list) -> bool:
    return bool(word) and any(n.startswith(word) for c in registered for n in (c.id, *c.aliases))


# -- progress -----------------------------------------------------------------------
class _Progress:
    """An outer bar over checks and nested bars for long loops (tqdm on a terminal),
    or one log line per check on stderr, or nothing (--quiet). ``show_seed``: name the
    seed of each run (a run over several seeds)."""

    def __init__(self, total: int, quiet: bool, show_seed: bool = False):
        self.quiet = quiet
        self.show_seed = show_seed
        self.bar = None
        self._tqdm = None
        if not quiet and sys.stderr.isatty():
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self._tqdm = tqdm
                self.bar = tqdm(total=total, desc="checks", unit="check", file=sys.stderr,
                                dynamic_ncols=True)
        self.total = total
        self.done = 0

    def nested(self) -> Callable[[Iterable, str], Iterable]:
        """What a check gets as ``ctx.progress``."""
        if self._tqdm is None:
            return _identity
        tqdm = self._tqdm

        def wrap(iterable: Iterable, desc: str = "") -> Iterable:
            return tqdm(iterable, desc=desc or None, leave=False, position=1, file=sys.stderr,
                        dynamic_ncols=True)

        return wrap

    def start(self, label: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(label, refresh=True)

    def finish(self, res: CheckResult) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif not self.quiet:
            seed = f" seed {res.seed}" if self.show_seed else ""
            print(f"[{self.done}/{self.total}] {status_word(res):7s} {res.id}{seed} "
                  f"({res.seconds:.1f} s)", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str("", refresh=False)
            self.bar.close()


def _identity(iterable: Iterable, desc: str = "") -> Iterable:
    return iterable


# -- results ------------------------------------------------------------------------
def status_word(res: CheckResult) -> str:
    """``pass``, ``FAIL`` or ``skipped``."""
    return {"passed": "pass", "failed": "FAIL", "skipped": "skipped"}[status_of(res)]


def _num(x: float) -> str:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return str(x)
    if x != x:
        return "-"
    return f"{x:.3g}"


def _print_results(results: list[CheckResult], seconds: float, out, *,
                   seeds: list[int] | None = None, partial: bool = False) -> None:
    """The results table, the failure notes, the pass-rate table (``seeds``) and the summary."""
    multi = len({r.seed for r in results}) > 1
    header = ("id", "seed", "result", "discrepancy", "tolerance", "seconds")
    rows = [(r.id, str(r.seed), status_word(r), _num(r.discrepancy), _num(r.tolerance),
             f"{r.seconds:.1f}") for r in results]
    right = (False, True, False, True, True, True)
    if not multi:  # one seed: the table as without --seeds
        header, right = header[:1] + header[2:], right[:1] + right[2:]
        rows = [row[:1] + row[2:] for row in rows]
    if rows:
        _print_table(header, rows, right, out)
        notes = []
        for r in results:
            word = status_word(r)
            at = f" (seed {r.seed})" if multi else ""
            if word == "skipped":
                notes.append(f"skipped {r.id}{at}: {r.details['skipped']}")
            elif word == "FAIL":
                notes.append(f"FAIL {r.id}{at}: {_why_failed(r)}")
        if notes:
            print("", file=out)
            for n in notes:
                print(n, file=out)
        print("", file=out)
    if seeds is not None and results:
        print(f"pass rate over seeds {format_seeds(seeds)}:", file=out)
        rate_rows = [(e["id"], rate_text(e), format_seeds(e["failed_seeds"]) or "-",
                      worst_text(e)) for e in pass_rates(results)]
        _print_table(("id", "passed/run", "failed at seeds", "worst discrepancy/tolerance"),
                     rate_rows, (False, True, False, True), out)
        print("", file=out)
    print(summary_line(results, seconds, partial=partial), file=out)


def _print_table(header: tuple, rows: list[tuple], right: tuple, out) -> None:
    """Columns padded to their widest cell; ``right`` says which are right-aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row):
        return "  ".join(c.rjust(w) if r else c.ljust(w)
                         for c, w, r in zip(row, widths, right)).rstrip()

    print(line(header), file=out)
    print(line(["-" * w for w in widths]), file=out)
    for row in rows:
        print(line(row), file=out)


def _why_failed(r: CheckResult) -> str:
    if r.error:
        return r.error
    unrejected = [c["name"] for c in r.controls if not c.get("rejected")]
    parts = []
    if not (r.discrepancy <= r.tolerance):
        parts.append(f"discrepancy {_num(r.discrepancy)} > tolerance {_num(r.tolerance)} "
                     f"({r.criterion})")
    if unrejected:
        parts.append("negative control not rejected: " + ", ".join(unrejected))
    return "; ".join(parts) or r.criterion


def summary_line(results: list[CheckResult], seconds: float, *, partial: bool = False) -> str:
    """``N passed, M failed[, K skipped] in S s``, led by ``PARTIAL (interrupted): `` for an
    interrupted run; over several seeds N, M and K count runs (check, seed)."""
    words = [status_word(r) for r in results]
    line = f"{words.count('pass')} passed, {words.count('FAIL')} failed"
    if words.count("skipped"):
        line += f", {words.count('skipped')} skipped"
    n_seeds = len({r.seed for r in results})
    if n_seeds > 1:
        n_checks = len({r.id for r in results})
        line += f" ({n_checks} check{'s' if n_checks > 1 else ''} x {n_seeds} seeds)"
    line = f"{line} in {seconds:.1f} s"
    return f"PARTIAL (interrupted): {line}" if partial else line


# -- commands -----------------------------------------------------------------------
def _cmd_settings(chk, out) -> int:
    """The settings table of one check."""
    if not chk.settings:
        print(f"{chk.id} declares no settings", file=out)
        return 0
    print(f"settings of {chk.id} (change with --set NAME=VALUE; sweep with --grid NAME=V1,V2,...):",
          file=out)
    rows = [tuple(st.describe()[k] for k in ("name", "kind", "quick", "full", "range", "doc"))
            for st in chk.settings]
    _print_table(("name", "kind", "quick", "full", "allowed", "doc"), rows,
                 (False, False, True, True, False, False), out)
    return 0


def _overrides(selected: list, assignments: list[str], profile: str = "quick") -> dict[str, dict]:
    """check id -> the --set values that apply to it (each validated by the check's setting, and
    paired lists against each other at ``profile``'s values); a name that no selected check
    declares is an error naming it."""
    from .settings import parse_assignment, resolve

    pairs = [parse_assignment(a) for a in assignments]
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        raise _UsageError(f"--set: {names} sets a setting twice")
    out: dict[str, dict] = {}
    for name, value in pairs:
        owners = [c for c in selected if any(st.name == name for st in c.settings)]
        if not owners:
            ids = ", ".join(c.id for c in selected[:3]) + (" ..." if len(selected) > 3 else "")
            raise _UsageError(f"--set: no selected check has a setting {name!r} ({ids}; "
                              "see python -m verify settings ID)")
        for c in owners:
            st = next(st for st in c.settings if st.name == name)
            try:
                st.validate(value)
            except ValueError as exc:
                raise _UsageError(f"--set: {exc}") from None
            out.setdefault(c.id, {})[name] = value
    for c in selected:
        if c.id in out:
            try:
                resolve(c.settings, profile, out[c.id], c.id)
            except ValueError as exc:
                raise _UsageError(f"--set: {exc}") from None
    return out


def _cmd_list(registered: list, out, as_json: bool = False) -> int:
    """One line per check: id, method and title cut to the terminal's width (80 columns when not
    a terminal; ``COLUMNS`` overrides), then, for each missing optional package, the checks a run
    here skips; ``as_json``: everything about each check, as JSON (``skipped_here``: why a run here
    skips it, or null)."""
    if as_json:
        import json

        from .settings import as_data

        rows = [{"id": c.id, "method": c.method, "title": c.title, "covers": list(c.covers),
                 "aliases": list(getattr(c, "aliases", ())), "needs": list(getattr(c, "needs", ())),
                 "skipped_here": c.available(),
                 "settings": [{"name": st.name, "kind": st.kind, **as_data({"quick": st.default("quick"),
                                                                         "full": st.default("full")}),
                               "low": st.low, "high": st.high, "doc": st.doc} for st in getattr(c, "settings", ())]}
                for c in registered]
        json.dump(rows, out, indent=1)
        out.write("\n")
        return 0
    if not registered:
        print("(no checks registered)", file=out)
        return 0
    from theory.cli import fitted_table, terminal_width

    fitted_table([(c.id, c.method, c.title) for c in registered], ("id", "method", "title"), out,
                 width=terminal_width(out))
    unavailable: dict[str, list[str]] = {}
    for c in registered:
        reason = c.available()
        if reason:
            unavailable.setdefault(reason, []).append(c.id)
    for reason, ids in unavailable.items():  # listed all the same; a run skips them and says why
        print(f"\n{len(ids)} of these will be skipped here ({reason}): {', '.join(ids)}", file=out)
    return 0


def _check_device(device: str) -> None:
    if device != "cuda":
        return
    try:
        import torch
    except ImportError:
        raise _UsageError("--device: cuda needs torch, which is not installed") from None
    if not torch.cuda.is_available():
        raise _UsageError("--device: cuda requested but torch.cuda.is_available() is False")


def _run_all(selected: list, seeds: list[int], *, profile: str, device: str, quiet: bool,
             workers: int | None = None, scheduler: str | None = None, store=None,
             resume: bool = False, overrides: dict | None = None,
             points: list[dict] | None = None,
             draw: bool | Callable = False) -> tuple[list[CheckResult], float, bool]:
    """Run every selected check at every seed (seed by seed; on Dask as tasks); stops at
    Ctrl-C. ``draw``: draw the figures as the runs finish (for a report), or, a function of the
    task, those of the runs it is true for.

    Returns the results of the runs that finished (in task order), the wall time and whether the
    run was interrupted.
    """
    from .execute import Interrupted, Task, execute

    multi = len(seeds) > 1
    if points is not None:  # a sweep: one check, every grid point at every seed
        tasks = [Task(selected[0].id, seed, profile, device, point) for point in points for seed in seeds]
    else:
        tasks = [Task(chk.id, seed, profile, device, dict((overrides or {}).get(chk.id, {})))
                 for seed in seeds for chk in selected]
    progress = _Progress(len(tasks), quiet, show_seed=multi)
    t0 = time.perf_counter()
    interrupted = False
    try:
        results = execute(tasks, workers=workers, scheduler=scheduler, store=store, resume=resume,
                          on_result=progress.finish, progress=progress.nested(), draw=draw)
    except Interrupted as exc:
        results, interrupted = exc.results, True
    finally:
        progress.close()
    return results, time.perf_counter() - t0, interrupted


def run_checks(selected: list, *, profile: str, seed: int = 0, device: str, quiet: bool,
               report: str | None, seeds: list[int] | None = None,
               overwrite: bool = False, workers: int | None = None, scheduler: str | None = None,
               store: str | None = None, resume: bool = False, overrides: dict | None = None,
               sweep: list | None = None, figures: str = "first") -> int:
    """Run ``selected`` checks (once per seed of ``seeds``, else at ``seed``), print the
    table and write the report; returns the exit status.

    ``overrides``: check id -> settings (``--set``). ``sweep``: the grids of a sweep of the one
    selected check (``[(name, [values])]``): every grid point at every seed, and the sweep's
    table and validity map in the report. ``figures``: which runs' figures the report draws
    (:data:`verify.report.FIGURE_CHOICES`; every run's figure data is written as CSV).

    The report folder is checked before the first check runs (status 2 if it cannot take
    the report). Ctrl-C during the checks gives status 130 and a report marked partial
    (see :func:`_save_partial`).
    """
    from .results import Store

    try:
        folder = ReportFolder(report, overwrite=overwrite, param="--report") if report else None
        if store is None and folder is not None:
            store = folder.target / STORE_NAME
        if resume and store is None:
            raise ValueError("--resume: needs a store (--store PATH, or a report folder)")
        db = Store(store) if store is not None else None
    except ValueError as exc:
        if "folder" in locals() and folder is not None:
            folder.discard()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        points = None
        if sweep is not None:
            from .sweep import grid_points

            points = grid_points(selected[0], sweep, (overrides or {}).get(selected[0].id))
        results, seconds, interrupted = _run_all(
            selected, [seed] if seeds is None else seeds, profile=profile, device=device,
            quiet=quiet, workers=workers, scheduler=scheduler, store=db, resume=resume,
            overrides=overrides, points=points,
            draw=(lambda task: draws_figures(figures, task.seed, seeds)) if folder is not None else False)
        _print_results(results, seconds, sys.stdout, seeds=seeds, partial=interrupted)
        settings = dict(profile=profile, seed=seed if seeds is None else None, device=device,
                        seconds=seconds, seeds=seeds, figures_of=figures)
        if sweep is not None and results:
            _print_sweep(results, [n for n, _ in sweep], sys.stdout)
            settings["sweep"] = (selected[0].id, [n for n, _ in sweep])
        if folder is not None and not interrupted:
            try:
                status = _save_complete(folder, results, settings, quiet)
            except KeyboardInterrupt:  # while drawing figures: keep the numbers
                interrupted = True
            else:
                if status:
                    return status
        if interrupted:
            return _interrupted(folder, results, settings)
        return 1 if any(status_word(r) == "FAIL" for r in results) else 0
    except ValueError as exc:  # e.g. --scheduler cannot be reached
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if db is not None:
            db.close()
        if folder is not None:
            folder.discard()


def _save_complete(folder: ReportFolder, results: list, settings: dict, quiet: bool) -> int:
    """Write the finished run's report and move it into place; 0, or 2 when it cannot (a
    report that is complete but cannot be moved into place is kept beside the folder)."""
    try:
        _write_report_files(results, folder.staging, settings)
    except OSError as exc:
        print(f"error: --report: cannot write {folder.shown!r} ({exc})", file=sys.stderr)
        return 2
    try:
        target = folder.commit()
    except (OSError, ValueError) as exc:  # the folder changed during the run
        aside = folder.set_aside()
        kept = f"; the report is kept in {str(aside)!r}" if aside else ""
        print(f"error: --report: cannot replace {folder.shown!r} ({exc}){kept}",
              file=sys.stderr)
        return 2
    if not quiet:
        print(f"report: {target / 'report.md'}", file=sys.stderr)
    return 0


def _interrupted(folder: ReportFolder | None, results: list, settings: dict) -> int:
    """After Ctrl-C: save what finished as a partial report (if any); one line; status 130."""
    if folder is None:
        print("interrupted", file=sys.stderr)
        return 130
    folder.discard()
    print(f"interrupted: {_save_partial(folder, results, settings)}", file=sys.stderr)
    return 130


def _save_partial(folder: ReportFolder, results: list, settings: dict) -> str:
    """Write the report of an interrupted run, marked partial, where it replaces no complete
    report (:func:`verify.report.partial_destination`); returns what happened, in words.

    Figures are drawn unless Ctrl-C comes again, in which case the report is written
    without them, with Ctrl-C held.
    """
    if not results:
        return "no check had finished; no report written"
    dest = partial_destination(folder.target)
    if dest is None:
        return (f"no partial report written: {folder.shown!r} and its '-partial' folder "
                "hold other reports or files, left untouched")
    try:
        _write_partial(dest, results, settings, figures=True)
    except KeyboardInterrupt:
        with sigint_deferred():
            _write_partial(dest, results, settings, figures=False)
    except (OSError, ValueError) as exc:
        return f"no partial report written ({exc})"
    if dest == folder.target:
        return f"partial report of the {len(results)} finished runs in {folder.shown!r}"
    return (f"partial report of the {len(results)} finished runs in "
            f"{folder.shown.rstrip('/') + '-partial'!r}; the report in {folder.shown!r} is "
            "untouched")


def _write_partial(dest, results: list, settings: dict, *, figures: bool) -> None:
    """Write a report marked partial into ``dest`` (through a staging folder)."""
    partial = ReportFolder(dest, param="--report")
    try:
        _write_report_files(results, partial.staging, settings, partial=True, figures=figures)
        partial.commit()
    finally:
        partial.discard()


def _write_report_files(results: list, out_dir, settings: dict, **kw) -> None:
    """The report's files (:func:`verify.report.write_files`) and, for a sweep, its table and
    validity map (:mod:`verify.sweep`)."""
    settings = dict(settings)
    sweep = settings.pop("sweep", None)
    write_files(results, out_dir, **settings, **kw)
    if sweep is None:
        return
    from pathlib import Path

    from .report import _have_matplotlib, render_figure
    from .sweep import FIGURE, rows, validity_figure, write_sweep

    check_id, names = sweep
    table = rows(results, names)
    write_sweep(out_dir, table, check_id=check_id, grid_names=names)
    if kw.get("figures", True) and _have_matplotlib() and table:
        figures = Path(out_dir) / "figures"
        figures.mkdir(exist_ok=True)
        render_figure(validity_figure(table, check_id=check_id, grid_names=names), figures / f"{FIGURE}.png")


def _print_sweep(results: list, names: list[str], out) -> None:
    """The sweep's table: the grid settings, seed, discrepancy / tolerance, result."""
    from .sweep import rows

    table = rows(results, names)
    print(f"sweep of {results[0].id} (ratio = discrepancy / tolerance; <= 1 passes):", file=out)
    _print_table((*names, "seed", "ratio", "result"),
                 [(*(str(r[n]) for n in names), str(r["seed"]), _num(r["ratio"]),
                   "pass" if r["passed"] else "FAIL") for r in table],
                 (*(True for _ in names), True, True, False), out)
    print("", file=out)


def _parse(argv: list[str] | None):
    """The parsed arguments, with ``seeds`` (a list or None) and ``seed`` checked."""
    args = _parser().parse_intermixed_args(argv)
    if args.seeds is not None:
        if args.seed is not None:
            raise _UsageError("--seeds: cannot be combined with --seed (give one of them)")
        try:
            args.seeds = parse_seeds(args.seeds)
        except ValueError as exc:
            raise _UsageError(str(exc)) from None
    if args.seed is None:
        args.seed = 0
    return args


def _one_check(id: str):
    """The check ``id`` (an alias works); a usage error naming it otherwise."""
    from .registry import get_check

    try:
        return get_check(id)
    except ValueError:
        raise _UsageError(f"id: unknown check {id!r} (see 'python -m verify list')") from None


def _selection(args, registered: list) -> list:
    """The checks named on the command line (the ``list`` command is handled before)."""
    if args.covers:
        if args.command not in (None, "run") or args.ids:
            raise _UsageError("--covers: selects the checks itself; give no command but 'run' or 'list', and no ids")
        return covering(args.covers, registered)
    if args.command is None:
        raise _UsageError("command: missing; give list, all, run or a check id (see 'python -m verify --help')")
    if args.command == "all":
        if args.ids:
            raise _UsageError("all: takes no ids (use 'run ID ...' or plain ids)")
        return registered
    if args.command == "run":
        if not args.ids:
            raise _UsageError("run: give at least one check id or id prefix")
        return select(args.ids, registered)
    if _is_check_pattern(args.command, registered):
        return select([args.command, *args.ids], registered)
    raise _UsageError(f"command: expected list, all, run or a check id, got "
                      f"{args.command!r} (see 'python -m verify list')")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 pass, 1 a check failed, 2 usage,
    130 interrupted)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    """:func:`main` without the Ctrl-C guard: parse, select, check the device, run."""
    try:
        args = _parse(argv)
        if args.workers and args.scheduler is None and args.command not in (None, "list", "settings"):
            from .execute import start_fork_server

            start_fork_server(args.workers)  # its imports run while this process loads the checks
        registered = registered_checks()
        if args.json and args.command != "list":
            raise _UsageError("--json: only with list")
        if args.command == "list":
            listed = covering(args.covers, registered) if args.covers else registered
            for prefix in args.ids:
                if not any(c.id.startswith(prefix) for c in listed):
                    raise _UsageError(f"list: no check id starts with {prefix!r}")
            if args.ids:
                listed = [c for c in listed if any(c.id.startswith(prefix) for prefix in args.ids)]
            return _cmd_list(listed, sys.stdout, as_json=args.json)
        if args.command == "settings":
            if len(args.ids) != 1:
                raise _UsageError("settings: give one check id")
            return _cmd_settings(_one_check(args.ids[0]), sys.stdout)
        sweep = None
        if args.command == "sweep":
            if len(args.ids) != 1:
                raise _UsageError("sweep: give one check id")
            if not args.grids:
                raise _UsageError("sweep: give at least one --grid NAME=V1,V2,...")
            from .sweep import parse_grid

            selected = [_one_check(args.ids[0])]
            try:
                sweep = [parse_grid(g) for g in args.grids]
            except ValueError as exc:
                raise _UsageError(str(exc)) from None
        elif args.grids:
            raise _UsageError("--grid: only with the sweep command")
        else:
            selected = _selection(args, registered)
        try:
            overrides = _overrides(selected, args.assignments, args.profile)
        except ValueError as exc:
            raise _UsageError(str(exc)) from None
        if sweep is not None:
            from .sweep import grid_points

            try:
                grid_points(selected[0], sweep, overrides.get(selected[0].id))
            except ValueError as exc:
                raise _UsageError(str(exc)) from None
        _check_device(args.device)
    except SystemExit as exc:  # argparse --help
        return int(exc.code or 0)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_checks(selected, profile=args.profile, seed=args.seed, device=args.device,
                      quiet=args.quiet, report=args.report, seeds=args.seeds,
                      overwrite=args.overwrite, workers=args.workers, scheduler=args.scheduler,
                      store=args.store, resume=args.resume, overrides=overrides, sweep=sweep,
                      figures=args.figures)
