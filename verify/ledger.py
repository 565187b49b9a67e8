"""Coverage ledgers: every numbered item of a paper, with its status and its evidence.

A ledger is ``docs/ledger/<topic>.toml`` for a built-in topic, or ``ledger.toml`` inside the
topic package (how a plug-in ships its own: :func:`ledger_path`), one ``[[item]]`` table per
numbered item of the paper (equation, lemma, theorem, corollary, remark, definition, figure or table claim,
appendix result)::

    [[item]]
    ref = "eq. 10"                  # "eqs. 40-41", "Lemma 2", "Theorem 4(b)", "Fig. 4", ...
    kind = "result"                 # or "notation"
    status = "verified"             # see STATUSES
    closed_forms = ["linear_attention.merged.sigma"]
    checks = ["linear_attention.merged.flow_sigmoid_aligned"]
    note = ""                       # required for "not checkable" and "missing"

:func:`load` reads and validates one ledger: the fields and their types, the status, the
note where one is required, and, against the registries, that every closed form and check it
names exists and that every registered closed form of the topic appears in some item.
:func:`counts` tallies items by status. ``python -m verify.ledger`` validates every ledger and
prints the counts (exit 1 on a problem).
"""

from __future__ import annotations

import sys
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = ["STATUSES", "KINDS", "Item", "Ledger", "LedgerError", "LEDGER_DIR", "ledger_path", "load", "load_all",
           "counts"]

#: ``verified``: a check confirms the printed result; ``erratum``: the printed form is wrong
#: and a check decides for the corrected one; ``refuted``: a check shows the claim fails;
#: ``notation``: a definition with nothing to verify; ``not checkable``: no quantitative
#: content, or outside what can be computed (the note says why); ``missing``: not covered yet.
STATUSES = ("verified", "erratum", "refuted", "notation", "not checkable", "missing")
KINDS = ("result", "notation")
#: Statuses whose item must name at least one check.
_NEEDS_CHECK = ("verified", "erratum", "refuted")
_NEEDS_NOTE = ("not checkable", "missing")

#: The repository root, and where the built-in topics keep their ledgers.
ROOT = Path(__file__).resolve().parents[1]
LEDGER_DIR = ROOT / "docs" / "ledger"


def ledger_path(topic: str) -> Path:
    """Where ``topic``'s ledger is: ``ledger.toml`` in the topic package when there is one (a
    plug-in ships its ledger with its code), else ``docs/ledger/<topic>.toml``. The path may not
    exist (a topic without a ledger)."""
    from importlib import import_module

    from theory.papers import topics

    t = topics().get(topic)
    if t is not None:
        here = Path(import_module(t.package).__file__).parent / "ledger.toml"
        if here.is_file():
            return here
    return LEDGER_DIR / f"{topic}.toml"


class LedgerError(ValueError):
    """A ledger that does not parse or does not agree with the registries."""


@dataclass(frozen=True)
class Item:
    """One numbered item of a paper."""

    ref: str
    kind: str
    status: str
    closed_forms: tuple[str, ...]
    checks: tuple[str, ...]
    note: str


@dataclass(frozen=True)
class Ledger:
    """The items of one paper, in the paper's order."""

    topic: str
    path: Path
    items: tuple[Item, ...]

    def counts(self) -> dict[str, int]:
        return counts(self.items)

    def refs_of(self, id: str) -> list[str]:
        """The refs of the items that name closed form or check ``id``."""
        return [it.ref for it in self.items if id in it.closed_forms or id in it.checks]


def counts(items) -> dict[str, int]:
    """Items per status, in the order of :data:`STATUSES` (zeros included)."""
    c = Counter(it.status for it in items)
    return {s: c.get(s, 0) for s in STATUSES}


def _strings(path, k, item, field) -> tuple[str, ...]:
    value = item.get(field, [])
    if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
        raise LedgerError(f"{path}: item {k} ({item.get('ref', '?')}): {field} must be a list of ids")
    return tuple(value)


def _parse(path: Path) -> tuple[Item, ...]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LedgerError(f"{path}: {exc}") from None
    extra = set(data) - {"item"}
    if extra or not isinstance(data.get("item"), list) or not data["item"]:
        raise LedgerError(f"{path}: expected only [[item]] tables, got {sorted(data)}")
    items = []
    for k, raw in enumerate(data["item"], start=1):
        unknown = set(raw) - {"ref", "kind", "status", "closed_forms", "checks", "note"}
        if unknown:
            raise LedgerError(f"{path}: item {k}: unknown fields {sorted(unknown)}")
        ref, kind, status, note = (raw.get(f) for f in ("ref", "kind", "status", "note"))
        if not isinstance(ref, str) or not ref.strip():
            raise LedgerError(f"{path}: item {k}: ref must be a non-empty string")
        where = f"{path}: item {k} ({ref})"
        if kind not in KINDS:
            raise LedgerError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
        if status not in STATUSES:
            raise LedgerError(f"{where}: status must be one of {STATUSES}, got {status!r}")
        if not isinstance(note, str):
            raise LedgerError(f"{where}: note must be a string")
        if status in _NEEDS_NOTE and not note.strip():
            raise LedgerError(f"{where}: status {status!r} needs a note saying why")
        if (kind == "notation") != (status == "notation"):
            raise LedgerError(f"{where}: kind 'notation' goes with status 'notation', got {kind!r}/{status!r}")
        cfs, chks = _strings(path, k, raw, "closed_forms"), _strings(path, k, raw, "checks")
        if status in _NEEDS_CHECK and not chks:
            raise LedgerError(f"{where}: status {status!r} needs the check that decides it")
        items.append(Item(ref.strip(), kind, status, cfs, chks, note))
    dupes = [r for r, n in Counter(it.ref for it in items).items() if n > 1]
    if dupes:
        raise LedgerError(f"{path}: refs listed twice: {dupes}")
    return tuple(items)


def load(topic: str, path: Path | str | None = None, *, against_registries: bool = True) -> Ledger:
    """The validated ledger of ``topic`` (default path: :func:`ledger_path`).

    With ``against_registries``: every named closed form and check exists (a former check id,
    kept as an alias, does not count), each belongs to ``topic``, and every registered closed
    form of ``topic`` appears in some item. ``LedgerError`` (a ``ValueError``) names the file
    and the item otherwise."""
    path = Path(path) if path is not None else ledger_path(topic)
    if not path.is_file():
        raise LedgerError(f"{path}: no ledger for topic {topic!r}")
    items = _parse(path)
    if against_registries:
        import theory

        from .registry import all_checks

        known_cfs = {i for i in theory.ids() if i.split(".", 1)[0] == topic}
        known_checks = {c.id for c in all_checks()}
        for it in items:
            for i in it.closed_forms:
                if i not in known_cfs:
                    raise LedgerError(f"{path}: {it.ref}: no closed form {i!r} registered for {topic}")
            for c in it.checks:
                if c not in known_checks:
                    raise LedgerError(f"{path}: {it.ref}: no check {c!r} registered")
        named = {i for it in items for i in it.closed_forms}
        absent = sorted(known_cfs - named)
        if absent:
            raise LedgerError(f"{path}: closed forms in no item: {absent}")
    return Ledger(topic, path, items)


def load_all(against_registries: bool = True) -> dict[str, Ledger]:
    """The ledger of every topic that has one (:func:`ledger_path`), by topic: built-in topics, then
    plug-ins (the order of :func:`theory.papers.topics`)."""
    from theory.papers import topics

    paths = {t: ledger_path(t) for t in topics()}
    return {t: load(t, p, against_registries=against_registries) for t, p in paths.items() if p.is_file()}


def main(argv=None) -> int:
    try:
        ledgers = load_all()
    except LedgerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    width = max(len(t) for t in ledgers)
    print(f"{'paper':{width}}  items  " + "  ".join(STATUSES))
    for topic, led in ledgers.items():
        c = led.counts()
        print(f"{topic:{width}}  {len(led.items):5d}  " + "  ".join(f"{c[s]:{len(s)}d}" for s in STATUSES))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
