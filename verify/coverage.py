"""The coverage table of the README, generated from the coverage ledgers and the registries.

First, per paper, how many of its numbered items (:mod:`verify.ledger`) are verified, errata,
refuted, notation, not checkable or missing. Then one section per paper; one row per
registered closed form: id, source, status, whether the paper prints a form (``erratum``
where the printed form differs from the derivation; a form worked out from the paper's statement,
``printed_origin="worked"``, counts as derived only), the ledger items it answers, and the
checks that cover it. The two checks that cover every record of a topic
(``<topic>.symbolic_printed_forms``, ``<topic>.high_precision``) are named once above
the table instead of in every row.

``python -m verify.coverage`` rewrites the table between the markers in README.md;
``tests/test_readme.py`` fails when the README is out of date.
"""

from __future__ import annotations

import sys
from pathlib import Path

START, END = "<!-- coverage:start -->", "<!-- coverage:end -->"
_GENERIC = ("symbolic_printed_forms", "high_precision")


def _printed(cf) -> str:
    if cf.printed is None:
        return "derived only"
    if cf.printed_origin == "worked":  # the paper prints no formula: a worked form, not the paper's
        return "derived only (equals a worked form)"
    return "**erratum**" if cf.erratum else "equal"


def table() -> str:
    """The Markdown table (one section per paper)."""
    import theory

    from .registry import all_checks

    covering: dict[str, list[str]] = {}
    generic: dict[str, list[str]] = {}
    for chk in all_checks():
        is_generic = chk.id.endswith(_GENERIC)
        for id in chk.covers:
            (generic if is_generic else covering).setdefault(id, []).append(chk.id)
    from theory.papers import paper_of

    from .ledger import STATUSES, load_all

    ledgers = load_all()
    by_topic: dict[str, list] = {}
    for cf in theory.records():
        topic = cf.id.split(".", 1)[0]
        by_topic.setdefault(topic, []).append((cf, cf.source))
    out = ["Numbered items of each paper (`docs/ledger/<topic>.toml`; `python -m verify.ledger`):", "",
           "| paper | items | " + " | ".join(STATUSES) + " |", "|---" * (len(STATUSES) + 2) + "|"]
    for topic, led in ledgers.items():
        c = led.counts()
        paper = paper_of(topic).cite
        out.append(f"| {paper} | {len(led.items)} | " + " | ".join(str(c[s]) for s in STATUSES) + " |")
    out.append("")
    for topic, rows in by_topic.items():
        paper, led = paper_of(topic).cite, ledgers.get(topic)
        every = sorted({c for cf, _ in rows for c in generic.get(cf.id, [])})
        out.append(f"**{paper}**. Every row is also checked by {', '.join(f'`{c}`' for c in every)}.\n")
        out.append("| id | source | status | printed vs derived | ledger items | checks |")
        out.append("|---|---|---|---|---|---|")
        for cf, where in rows:
            chks = ", ".join(f"`{c}`" for c in covering.get(cf.id, [])) or "none yet"
            items = "; ".join(led.refs_of(cf.id)) if led else ""
            out.append(f"| `{cf.id}` | {where.replace('|', '/')} | {cf.status} | {_printed(cf)} | "
                       f"{items.replace('|', '/')} | {chks} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def section(readme: str) -> str:
    """The current generated part of ``readme`` (between the markers)."""
    i, j = readme.index(START) + len(START), readme.index(END)
    return readme[i:j].strip("\n") + "\n"


def rewrite(path: Path) -> bool:
    """Rewrite the table in ``path``; True when it changed."""
    text = path.read_text()
    new = text[: text.index(START) + len(START)] + "\n" + table() + text[text.index(END):]
    if new != text:
        path.write_text(new)
        return True
    return False


def main(argv=None) -> int:
    path = Path(argv[0] if argv else "README.md")
    print(("rewrote" if rewrite(path) else "unchanged:") + f" {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
