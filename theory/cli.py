"""Browse and evaluate the registered closed forms.

Commands
--------
list [PREFIX] [--json]
    One line per closed form: id, status and the title, cut to fit the terminal (80 columns
    when the output is not a terminal; an id too long for its column gets a line of its own,
    its status and title on the next line); ``show`` gives the full title and source. ``PREFIX``
    keeps the ids that start with it (``linear_attention.merged``). ``--json`` prints a list of
    objects ``{"id", "status", "source", "citation", "title", "params"}`` (``params``: one
    ``{"name", "kind", "doc"}`` per parameter, in call order) instead of the table.
show ID
    Title, source, status, parameters, the derived expression (pretty-printed and as
    LaTeX), the paper's printed form (or, headed as such, a form worked out from the paper's
    statement where it prints none) and whether it equals the derived one, the erratum,
    the documentation, the module that defines it, and a runnable example (an ``eval``
    command with its output, and the Python call).
eval ID --json '{"Lambda": [1, 0.5], "N": 5}'
    Evaluate at the given parameters and print JSON ``{"id": ID, "value": ...}``:
    matrices as nested lists, vectors as lists, scalars as numbers. ``Lambda`` may be a
    D x D symmetric positive-definite matrix or a list of its eigenvalues. With
    ``--backend mpmath`` the value is computed at ``--dps`` significant digits and printed
    as strings of that precision; the JSON numbers are then read as the decimals they spell
    (``0.1`` is 1/10 to ``--dps`` digits, not the float64 nearest to it).
cite ID
    The BibTeX entry of the paper the closed form ``ID`` comes from (``ID`` may also be a topic,
    e.g. ``linear_attention``), with its arXiv identifier and address; :func:`theory.bibtex` in
    Python. The toolkit itself is cited from ``CITATION.cff`` in its repository.
cache info | cache clear
    Where the cache of emitted functions is (:mod:`theory.cache`: a later process loads a
    record's numeric function from it instead of deriving and emitting again), whether it is
    on, how many entries it holds and their size; or delete its entries. The environment
    variable ``ATTENTION_THEORY_CACHE`` relocates the cache (a folder) or turns it off (``off``).
``--version``
    The toolkit's version.

Bad input (unknown id, missing or extra parameter, wrong shape, a covariance that is not
symmetric positive definite, N < 1, NaN, malformed JSON, an unknown option or a bad option
value) exits with status 2 and one line ``error: <parameter or option>: <what is wrong>`` on
stderr.

``--dps`` is at most 1000 digits: mpmath's cost grows faster than linearly with the precision
(``--dps 10000`` takes seconds for a scalar form, ``--dps 100000`` minutes), and the checks
need 50 to 100.

Examples
--------
::

    python -m theory list
    python -m theory list linear_attention.merged
    python -m theory list --json
    python -m theory --version
    python -m theory cache info
    python -m theory cite linear_attention.merged.sigma
    python -m theory show linear_attention.data.lambda_hat_sq
    python -m theory eval linear_attention.data.lambda_hat_sq --json '{"Lambda": [1, 0.5], "N": 5}'
    python -m theory eval linear_attention.data.yq_sq --json '{"Lambda": [1, 0.5]}' \\
        --backend mpmath --dps 50
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import os
import sys
import textwrap

__all__ = ["main", "example_values", "fitted_table", "terminal_width", "VersionAction"]

_DEFAULT_DPS = 50
#: Largest --dps: enough for any check (they use 50 to 100 digits); mpmath's cost grows faster
#: than linearly with the digits, so much larger values run for minutes.
MAX_DPS = 1000


class _UsageError(ValueError):
    """Bad input from the command line; printed as ``error: <message>``."""


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one line ``<option>: <what is wrong>`` (raised as
    :class:`_UsageError`, printed by :func:`main`) instead of a usage block and an exit."""

    def error(self, message):
        raise _UsageError(_one_line(message))


def _one_line(message: str) -> str:
    """argparse's message, led by the option or argument it is about.

    ``argument --backend: invalid choice: ...`` -> ``--backend: invalid choice: ...``;
    ``the following arguments are required: ID`` -> ``ID: required argument missing ...``;
    ``unrecognized arguments: --x`` -> ``--x: unrecognized argument ...``."""
    message = " ".join(message.split())
    if message.startswith("argument "):
        name, _, rest = message[len("argument "):].partition(": ")
        return f"{name.split('/')[-1]}: {rest}"
    if message.startswith("the following arguments are required: "):
        names = message.split(": ", 1)[1]
        return f"{names.split(',')[0].strip()}: required argument missing (see 'python -m theory -h')"
    if message.startswith("unrecognized arguments: "):
        args = message.split(": ", 1)[1]
        return f"{args.split()[0]}: unrecognized argument (see 'python -m theory COMMAND -h')"
    return f"command: {message}"


def _dps(text: str) -> int:
    """``--dps`` value: an integer from 1 to :data:`MAX_DPS`."""
    try:
        dps = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer number of digits, got {text!r}") from None
    if dps < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {dps}")
    if dps > MAX_DPS:
        raise argparse.ArgumentTypeError(
            f"must be <= {MAX_DPS} (mpmath's cost grows faster than linearly in the digits), got {dps}")
    return dps


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m theory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run 'python -m theory COMMAND -h' for the options of one command.",
    )
    p.add_argument("--version", action=VersionAction, help="print the toolkit's version and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    ls = sub.add_parser("list", help="list the registered closed forms",
                        description="One line per closed form: id, status and the title cut to the terminal's "
                                    "width (80 columns when not a terminal); 'show ID' prints it in full.")
    ls.add_argument("prefix", metavar="PREFIX", nargs="?", default="",
                    help="only the ids that start with PREFIX, e.g. linear_attention.merged")
    ls.add_argument("--json", action="store_true",
                    help="print a JSON list of {id, status, source, citation, title, params}")

    ca = sub.add_parser("cache", help="show or clear the cache of emitted functions",
                        description="The cache on disk of emitted numeric functions (theory.cache); "
                                    "ATTENTION_THEORY_CACHE=off turns it off, =FOLDER moves it.")
    ca.add_argument("action", choices=("info", "clear"),
                    help="info: folder, whether on, entries, size; clear: delete the entries")

    show = sub.add_parser("show", help="show one closed form: expression, LaTeX, erratum, docs, module, example",
                          description="Show one closed form in full.")
    show.add_argument("id", metavar="ID", help="closed-form id (see 'list')")
    show.add_argument("--no-compare", action="store_true",
                      help="skip the symbolic comparison of the printed and derived forms")

    ci = sub.add_parser("cite", help="print the BibTeX entry of the paper a closed form comes from",
                        description="Print the BibTeX entry of the paper the closed form ID (or topic ID) "
                                    "comes from.")
    ci.add_argument("id", metavar="ID", help="closed-form id (see 'list') or topic, e.g. linear_attention")

    ev = sub.add_parser(
        "eval", help="evaluate one closed form at parameters given as JSON",
        description="Evaluate one closed form; prints JSON {\"id\": ID, \"value\": ...}.",
        epilog="example: python -m theory eval linear_attention.data.lambda_hat_sq "
               "--json '{\"Lambda\": [1, 0.5], \"N\": 5}'")
    ev.add_argument("id", metavar="ID", help="closed-form id (see 'list')")
    ev.add_argument("--json", dest="params", metavar="OBJECT", default="{}",
                    help="parameters as a JSON object, e.g. '{\"Lambda\": [1, 0.5], \"N\": 5}'")
    ev.add_argument("--backend", choices=("numpy", "mpmath"), default="numpy",
                    help="numpy (float64, default) or mpmath (arbitrary precision)")
    ev.add_argument("--dps", type=_dps, default=None, metavar="DIGITS",
                    help=f"mpmath decimal digits, 1 to {MAX_DPS} (default {_DEFAULT_DPS}); only with "
                         "--backend mpmath. Capped because mpmath's cost grows faster than "
                         "linearly in the digits (10000 digits take seconds, 100000 minutes)")
    return p


# -- list ---------------------------------------------------------------------------
#: Width of ``list`` when the output is not a terminal.
LIST_WIDTH = 80


def _cmd_list(args, out) -> int:
    import theory

    cfs = [cf for cf in theory.records() if cf.id.startswith(args.prefix)]
    if args.prefix and not cfs:
        raise ValueError(f"PREFIX: no closed form id starts with {args.prefix!r}")
    if args.json:
        rows = [{"id": cf.id, "status": cf.status, "source": cf.source, "citation": cf.citation,
                 "title": cf.title, "params": [{"name": p.name, "kind": p.kind, "doc": p.doc} for p in cf.params]}
                for cf in cfs]
        json.dump(rows, out, indent=1)
        out.write("\n")
        return 0
    rows = [(cf.id, cf.status, cf.title) for cf in cfs]
    fitted_table(rows, ("id", "status", "title"), out, width=terminal_width(out))
    return 0


def terminal_width(out) -> int:
    """Columns of the terminal ``out`` writes to (``COLUMNS`` if set), else :data:`LIST_WIDTH`."""
    import shutil

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if out.isatty():
            return shutil.get_terminal_size((LIST_WIDTH, 24)).columns
    except (AttributeError, ValueError, OSError):
        pass
    return LIST_WIDTH


#: Fewest columns ``list`` keeps for the title; an id too long to leave them goes on a line of its own.
MIN_TITLE = 20


def fitted_table(rows, header, out, width: int | None = None) -> None:
    """Aligned columns fitting ``width`` (None: no limit): the last one cut (ending in ``...``);
    a first cell too long to leave :data:`MIN_TITLE` columns for the last goes on a line of its
    own, the row's other cells on the next line, in their columns."""
    if not rows:
        print("(no closed forms registered)", file=out)
        return
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header) - 1)]
    room = None
    if width is not None:
        rest = sum(w + 2 for w in widths[1:])
        widths[0] = max(len(str(header[0])), min(widths[0], width - rest - 2 - MIN_TITLE))
        room = max(width - sum(w + 2 for w in widths), MIN_TITLE)

    def cut(text):
        text = " ".join(str(text).split())
        if room is None or len(text) <= room:
            return text
        return text[: room - 3].rstrip() + "..."

    def line(r):
        cells = [str(c).ljust(w) for c, w in zip(r, widths)] + [cut(r[-1])]
        return "  ".join(cells).rstrip()

    print(line(header), file=out)
    print(line(["-" * len(h) for h in header]), file=out)
    for r in rows:
        if len(str(r[0])) > widths[0]:
            print(r[0], file=out)
            r = ("", *r[1:])
        print(line(r), file=out)


# -- version and cache -----------------------------------------------------------------
class VersionAction(argparse.Action):
    """``--version``: print the installed toolkit's version (looked up only when asked)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from .cache import toolkit_version

        print(f"attention-dynamics-theory {toolkit_version()}", file=sys.stdout)
        parser.exit()


def _cmd_cache(args, out) -> int:
    from . import cache

    if args.action == "clear":
        where = cache.info()["folder"]
        removed = cache.clear()
        print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {where}", file=out)
        return 0
    info = cache.info()
    size = info["bytes"]
    human = f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB"
    print(f"folder:   {info['folder']}", file=out)
    print(f"enabled:  {'yes' if info['enabled'] else f'no ({cache.ENV}=off)'}", file=out)
    print(f"entries:  {info['entries']}", file=out)
    print(f"size:     {size} bytes ({human})", file=out)
    print(f"version:  {info['toolkit_version']}", file=out)
    return 0


# -- show ---------------------------------------------------------------------------
def _cmd_show(args, out) -> int:
    import sympy as sp

    import theory

    cf = theory.get(args.id)
    unicode = (getattr(out, "encoding", None) or "").lower().replace("-", "") in ("utf8", "utf16")

    def section(name):
        print(f"\n{name}\n{'-' * len(name)}", file=out)

    def pretty(e):
        return sp.pretty(e, use_unicode=unicode, wrap_line=False)

    print(cf.id, file=out)
    print("=" * len(cf.id), file=out)
    print(cf.title, file=out)
    print(f"\nsource: {cf.citation}", file=out)
    link = theory.paper_of(cf.id).link
    if link:
        print(f"paper:  {link} (python -m theory cite {cf.id})", file=out)
    print(f"status: {cf.status}", file=out)
    print(f"output: {cf.output}", file=out)
    print(f"defined in: {defined_in(cf)}", file=out)

    section("Parameters")
    for p in cf.params:
        print(_wrap(p.describe(), indent="  ", hang="    "), file=out)

    expr = cf.expr
    section("Derived expression")
    print(textwrap.indent(pretty(expr), "  "), file=out)
    print(f"\nLaTeX: {cf.latex()}", file=out)

    printed = cf.printed_expr
    if printed is not None:
        section(cf.printed_label)
        print(textwrap.indent(pretty(printed), "  "), file=out)
        print(f"\nLaTeX: {cf.latex('printed')}", file=out)
        if args.no_compare:
            verdict = "not compared (--no-compare)"
        else:
            verdict = ("yes" if cf.forms_equal("derived", "printed")
                       else "NO: the printed form differs from the derived one")
        print(f"\nequal to the derived expression: {verdict}", file=out)

    if cf.erratum:
        section("Erratum")
        print(_wrap(cf.erratum), file=out)

    if cf.doc:
        section("Notes")
        print(_wrap_prose(cf.doc), file=out)

    section("Example")
    values = example_values(cf)
    print(f"  python -m theory eval {cf.id} --json '{json.dumps(values)}'", file=out)
    print(f"  {json.dumps({'id': cf.id, 'value': _np_jsonable(cf('numpy', **values))}, allow_nan=False)}",
          file=out)
    args = ", ".join(f"{k}={v!r}" for k, v in values.items())
    print(f"\n  >>> import theory\n  >>> theory.get({cf.id!r})({args})", file=out)
    return 0


def defined_in(cf) -> str:
    """``module (path:line)`` of the function that derives ``cf``, the path relative to the
    package's parent folder."""
    import inspect
    from pathlib import Path

    fn = inspect.unwrap(cf.derive)
    module = getattr(fn, "__module__", "?")
    try:
        path = Path(inspect.getsourcefile(fn))
        line = inspect.getsourcelines(fn)[1]
        root = Path(__import__(module.split(".")[0]).__file__).resolve().parents[1]
        return f"{module} ({path.resolve().relative_to(root)}:{line})"
    except (TypeError, OSError, ValueError):
        return module


def example_values(cf) -> dict:
    """A parameter point where ``cf`` evaluates: the record's own :attr:`~theory.ClosedForm.example`
    completed by each parameter's :meth:`~theory.Param.example`, as JSON-ready values."""
    values = dict(cf.example or {})
    for p in cf.params:
        values.setdefault(p.name, p.example())

    def plain(x):
        if hasattr(x, "tolist"):
            return x.tolist()
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        return x

    return {k: plain(v) for k, v in values.items()}


def _wrap_prose(text: str) -> str:
    """Fill plain paragraphs to 88 columns; keep indented blocks and lists as written."""
    out = []
    for para in textwrap.dedent(text).strip().split("\n\n"):
        lines = para.splitlines()
        if any(ln[:1] in (" ", "\t", "-", "*") or ln.lstrip()[:2] in ("- ", "* ")
               for ln in lines):
            out.append(para)
        else:
            out.append(textwrap.fill(" ".join(para.split()), width=88))
    return "\n\n".join(out)


def _wrap(text: str, indent: str = "", hang: str = "") -> str:
    paras = [" ".join(p.split()) for p in textwrap.dedent(text).strip().split("\n\n")]
    return "\n\n".join(textwrap.fill(p, width=88, initial_indent=indent,
                                     subsequent_indent=hang or indent) for p in paras)


# -- eval ---------------------------------------------------------------------------
def _parse_params(text: str, exact: bool = False) -> dict:
    """The ``--json`` object. ``exact`` (``--backend mpmath``): JSON numbers with a fraction or an
    exponent are read as ``decimal.Decimal`` (the decimal text exactly; integers are exact
    anyway), so that the mpmath backend gets ``0.1`` as 1/10 at ``--dps`` digits, not as the
    float64 nearest to it."""
    from decimal import Decimal

    try:
        params = json.loads(text, parse_float=Decimal if exact else None)
    except json.JSONDecodeError as exc:
        raise _UsageError(f"--json: malformed JSON ({exc})") from None
    except RecursionError:
        raise _UsageError("--json: nested too deeply") from None
    if not isinstance(params, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null",
                int: "a number", float: "a number", Decimal: "a number"}.get(type(params), "a value")
        raise _UsageError(f"--json: expected a JSON object of parameters such as "
                          f"'{{\"Lambda\": [1, 0.5], \"N\": 5}}', got {kind}: "
                          f"{text.strip()[:60]}")
    return params


def _cmd_eval(args, out) -> int:
    import theory

    cf = theory.get(args.id)
    params = _parse_params(args.params, exact=args.backend == "mpmath")
    if args.backend == "mpmath":
        import mpmath

        dps = _DEFAULT_DPS if args.dps is None else args.dps
        with mpmath.workdps(dps):
            value = _mp_jsonable(cf("mpmath", **params), dps, cf.output)
    else:
        if args.dps is not None:
            raise _UsageError("--dps: only used with --backend mpmath")
        value = _np_jsonable(cf("numpy", **params))
    json.dump({"id": cf.id, "value": value}, out, allow_nan=False)
    out.write("\n")
    return 0


def _np_jsonable(x):
    import numpy as np

    arr = np.asarray(x, dtype=np.float64)
    return _finite_or_str(arr.tolist())


def _finite_or_str(x):
    if isinstance(x, list):
        return [_finite_or_str(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)  # "nan", "inf": JSON has no literal for them
    return x


def _mp_jsonable(x, dps: int, output: str):
    """mpmath value -> strings of ``dps`` digits: nested lists (matrix), list (vector)."""
    import mpmath

    if isinstance(x, mpmath.matrix):
        rows = [[_mp_str(x[i, j], dps) for j in range(x.cols)] for i in range(x.rows)]
        if output == "vector":
            return [v for r in rows for v in r]
        if output == "scalar" and x.rows == x.cols == 1:
            return rows[0][0]
        return rows
    if isinstance(x, (list, tuple)):
        return [_mp_jsonable(v, dps, "scalar") for v in x]
    return _mp_str(x, dps)


def _mp_str(v, dps: int) -> str:
    import mpmath

    if isinstance(v, numbers.Number) and not isinstance(v, (mpmath.mpf, mpmath.mpc)):
        v = mpmath.mpmathify(v)
    return mpmath.nstr(v, dps)


# -- main ---------------------------------------------------------------------------
def _cmd_cite(args, out) -> int:
    import theory

    if args.id not in theory.PAPERS:
        theory.get(args.id)  # an unknown id: ValueError naming it, with the closest ids
    print(theory.bibtex(args.id), file=out)
    return 0


_COMMANDS = {"list": _cmd_list, "show": _cmd_show, "eval": _cmd_eval, "cite": _cmd_cite, "cache": _cmd_cache}


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 bad input)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        return _COMMANDS[args.command](args, sys.stdout)
    except SystemExit as exc:  # argparse: --help, --version (0)
        return int(exc.code or 0)
    except ValueError as exc:  # bad input; messages start with the parameter's name
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `python -m theory list | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
