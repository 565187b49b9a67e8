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

Each run prints a results table (id, pass/FAIL, discrepancy, tolerance, seconds) and a
summary line, and writes ``results.json``, ``report.md`` and figures to ``--report``.
Exit status: 0 when every check passed (skipped checks do not count), 1 when any
failed, 2 for a usage error.

Examples
--------
::

    python -m verify list
    python -m verify all --profile quick --seed 0
    python -m verify linear_attention.merged --report out/
    python -m verify all --profile full --device cuda
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from typing import Callable, Iterable

from .check import CheckResult, PROFILES, checks, run_check
from .report import status_of

__all__ = ["main", "select"]

_COMMANDS = ("list", "all", "run")


class _UsageError(ValueError):
    """Bad command-line input; printed as one ``error: ...`` line, exit status 2."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m verify",
        usage="python -m verify [options] {list,all,run} [ID ...]\n"
              "       python -m verify [options] ID [ID ...]",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("command", metavar="COMMAND", help="list, all, run, or a check id")
    p.add_argument("ids", metavar="ID", nargs="*",
                   help="check ids or id prefixes (with 'run' or on their own)")
    p.add_argument("--profile", choices=PROFILES, default="quick",
                   help="quick: minutes on a laptop (default); full: the papers' sizes")
    p.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    p.add_argument("--report", metavar="DIR", default="verify-report",
                   help="report folder (default verify-report; '' writes no report)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="device for torch checks (default cpu)")
    p.add_argument("--quiet", action="store_true", help="no progress output on stderr")
    return p


# -- selection ----------------------------------------------------------------------
def registered_checks() -> list:
    """Every registered check, after importing all modules of :mod:`verify.checks`."""
    importlib.import_module("verify.checks")  # explicit: ``verify.checks`` is also a function
    return checks()


def select(patterns: Iterable[str], registered: list | None = None) -> list:
    """The checks named by ``patterns``, in registration order, without repeats.

    A pattern selects the check with that id, else every check whose id starts with
    ``pattern + "."`` (a topic such as ``linear_attention.merged``), else every check
    whose id starts with ``pattern``. A pattern matching nothing is a usage error.
    """
    registered = registered_checks() if registered is None else registered
    chosen: dict[str, object] = {}
    for pat in patterns:
        if not pat:
            raise _UsageError("id: empty check id")
        hits = ([c for c in registered if c.id == pat]
                or [c for c in registered if c.id.startswith(pat + ".")]
                or [c for c in registered if c.id.startswith(pat)])
        if not hits:
            raise _UsageError(f"id: no check matches {pat!r} (see 'python -m verify list')")
        for c in hits:
            chosen.setdefault(c.id, c)
    order = {c.id: i for i, c in enumerate(registered)}
    return sorted(chosen.values(), key=lambda c: order[c.id])


def _is_check_pattern(word: str, registered: list) -> bool:
    return bool(word) and any(c.id.startswith(word) for c in registered)


# -- progress -----------------------------------------------------------------------
class _Progress:
    """An outer bar over checks and nested bars for long loops (tqdm on a terminal),
    or one log line per check on stderr, or nothing (--quiet)."""

    def __init__(self, total: int, quiet: bool):
        self.quiet = quiet
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

    def start(self, check_id: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(check_id, refresh=True)

    def finish(self, res: CheckResult) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif not self.quiet:
            print(f"[{self.done}/{self.total}] {status_word(res):7s} {res.id} "
                  f"({res.seconds:.1f} s)", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str("", refresh=False)
            self.bar.close()


def _identity(iterable: Iterable, desc: str = "") -> Iterable:
    return iterable


# -- results ------------------------------------------------------------------------
def skipped_result(chk, reason: str, *, profile: str, seed: int) -> CheckResult:
    """A record for a check that cannot run here (``details["skipped"]`` holds why)."""
    return CheckResult(
        id=chk.id, title=chk.title, covers=list(chk.covers), method=chk.method,
        profile=profile, seed=seed, passed=False, measured=None, predicted=None,
        discrepancy=float("nan"), tolerance=float("nan"), criterion=f"skipped: {reason}",
        controls=[], details={"skipped": reason}, seconds=0.0)


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


def _print_results(results: list[CheckResult], seconds: float, out) -> None:
    header = ("id", "result", "discrepancy", "tolerance", "seconds")
    rows = [(r.id, status_word(r), _num(r.discrepancy), _num(r.tolerance), f"{r.seconds:.1f}")
            for r in results]
    if rows:
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        right = (False, False, True, True, True)

        def line(row):
            return "  ".join(c.rjust(w) if r else c.ljust(w)
                             for c, w, r in zip(row, widths, right)).rstrip()

        print(line(header), file=out)
        print(line(["-" * w for w in widths]), file=out)
        for row in rows:
            print(line(row), file=out)
        notes = []
        for r in results:
            word = status_word(r)
            if word == "skipped":
                notes.append(f"skipped {r.id}: {r.details['skipped']}")
            elif word == "FAIL":
                notes.append(f"FAIL {r.id}: {_why_failed(r)}")
        if notes:
            print("", file=out)
            for n in notes:
                print(n, file=out)
        print("", file=out)
    print(summary_line(results, seconds), file=out)


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


def summary_line(results: list[CheckResult], seconds: float) -> str:
    """``N passed, M failed[, K skipped] in S s``."""
    words = [status_word(r) for r in results]
    line = f"{words.count('pass')} passed, {words.count('FAIL')} failed"
    if words.count("skipped"):
        line += f", {words.count('skipped')} skipped"
    return f"{line} in {seconds:.1f} s"


# -- commands -----------------------------------------------------------------------
def _cmd_list(registered: list, out) -> int:
    if not registered:
        print("(no checks registered)", file=out)
        return 0
    header = ("id", "method", "covers")
    rows = [(c.id, c.method, ", ".join(c.covers)) for c in registered]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(2)]
    for r in [header, tuple("-" * len(h) for h in header), *rows]:
        print(f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2]}".rstrip(), file=out)
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


def run_checks(selected: list, *, profile: str, seed: int, device: str, quiet: bool,
               report: str | None) -> int:
    """Run ``selected`` checks, print the table, write the report; the exit status."""
    progress = _Progress(len(selected), quiet)
    results: list[CheckResult] = []
    t0 = time.perf_counter()
    interrupted = False
    try:
        for chk in selected:
            progress.start(chk.id)
            reason = chk.available()
            if reason:
                res = skipped_result(chk, reason, profile=profile, seed=seed)
            else:
                res = run_check(chk, profile=profile, seed=seed, device=device,
                                progress=progress.nested())
            results.append(res)
            progress.finish(res)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
    seconds = time.perf_counter() - t0

    _print_results(results, seconds, sys.stdout)
    if report:
        from .report import write_report

        try:
            paths = write_report(results, report, profile=profile, seed=seed, device=device,
                                 seconds=seconds)
        except OSError as exc:
            print(f"error: --report: cannot write {report!r} ({exc})", file=sys.stderr)
            return 2
        if not quiet:
            print(f"report: {paths['report.md']}", file=sys.stderr)
    if interrupted:
        print("interrupted: the table and report hold the checks that finished",
              file=sys.stderr)
        return 130
    return 1 if any(status_word(r) == "FAIL" for r in results) else 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 pass, 1 a check failed, 2 usage)."""
    parser = _parser()
    try:
        args = parser.parse_intermixed_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    try:
        registered = registered_checks()
        if args.command == "list":
            if args.ids:
                raise _UsageError("list: takes no ids")
            return _cmd_list(registered, sys.stdout)
        if args.command == "all":
            if args.ids:
                raise _UsageError("all: takes no ids (use 'run ID ...' or plain ids)")
            selected = registered
        elif args.command == "run":
            if not args.ids:
                raise _UsageError("run: give at least one check id or id prefix")
            selected = select(args.ids, registered)
        elif _is_check_pattern(args.command, registered):
            selected = select([args.command, *args.ids], registered)
        else:
            raise _UsageError(f"command: expected list, all, run or a check id, got "
                              f"{args.command!r} (see 'python -m verify list')")
        if args.seed < 0:
            raise _UsageError(f"--seed: must be >= 0, got {args.seed}")
        _check_device(args.device)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_checks(selected, profile=args.profile, seed=args.seed, device=args.device,
                      quiet=args.quiet, report=args.report)
