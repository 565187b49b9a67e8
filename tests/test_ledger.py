"""The coverage ledgers (docs/ledger/<topic>.toml, or ledger.toml in a plug-in's topic package)
agree with the registries."""

import pytest

from verify import ledger

TOPICS = ("linear_attention", "preconditioned_gd", "localization", "scan_snap")


@pytest.mark.parametrize("topic", TOPICS)
def test_ledger_names_only_registered_ids_and_covers_every_record(topic):
    led = ledger.load(topic)  # raises LedgerError naming the item otherwise
    assert len(led.items) > 50
    assert sum(led.counts().values()) == len(led.items)


def test_every_topic_with_records_has_a_ledger():
    import theory

    topics = {i.split(".", 1)[0] for i in theory.ids()}
    assert set(TOPICS) <= topics
    assert {p.stem for p in ledger.LEDGER_DIR.glob("*.toml")} == set(TOPICS)
    assert set(ledger.load_all()) == topics  # the plug-in's ledger ships in its topic package


def test_a_plugin_ships_its_ledger_with_its_code():
    path = ledger.ledger_path("saxe_linear")
    assert path.name == "ledger.toml" and path.parent.name == "topic" and ledger.LEDGER_DIR not in path.parents
    led = ledger.load("saxe_linear")
    assert led.counts()["verified"] >= 3 and all(it.note for it in led.items if it.status == "missing")


def test_every_check_of_a_topic_appears_in_its_ledger():
    from verify.registry import all_checks

    ledgers = ledger.load_all()
    named = {c for led in ledgers.values() for it in led.items for c in it.checks}
    generic = ("symbolic_printed_forms", "high_precision")
    absent = [c.id for c in all_checks()
              if c.id.split(".", 1)[0] in ledgers and c.id not in named and not c.id.endswith(generic)]
    assert not absent, f"checks in no ledger item: {absent}"


GOOD = """
[[item]]
ref = "eq. 1"
kind = "notation"
status = "notation"
closed_forms = []
checks = []
note = ""
"""


def _write(tmp_path, text):
    p = tmp_path / "topic.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, message", [
    (GOOD.replace('status = "notation"', 'status = "done"'), "status must be one of"),
    (GOOD.replace('kind = "notation"\nstatus = "notation"', 'kind = "result"\nstatus = "missing"'), "needs a note"),
    (GOOD.replace('kind = "notation"\nstatus = "notation"', 'kind = "result"\nstatus = "verified"'),
     "needs the check"),
    (GOOD.replace('kind = "notation"', 'kind = "result"'), "goes with status"),
    (GOOD + GOOD, "listed twice"),
    (GOOD.replace("checks = []", "checks = [1]"), "checks must be a list of ids"),
    (GOOD.replace('note = ""', 'note = ""\nextra = 1'), "unknown fields"),
    ("[[item]\n", "topic.toml"),
    ("", "expected only [[item]] tables"),
])
def test_malformed_ledgers_are_refused_naming_the_problem(tmp_path, text, message):
    with pytest.raises(ledger.LedgerError, match="topic.toml"):
        ledger.load("topic", _write(tmp_path, text), against_registries=False)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ledger.load("topic", _write(tmp_path, text), against_registries=False)


def test_ledger_against_registries_refuses_unknown_ids_and_uncovered_records(tmp_path):
    text = (ledger.LEDGER_DIR / "linear_attention.toml").read_text()
    ok = ledger.load("linear_attention", _write(tmp_path, text))
    assert ok.counts()["verified"] > 0
    bad_check = text.replace('checks = ["linear_attention.merged.', 'checks = ["linear_attention.merged.nope_', 1)
    with pytest.raises(ledger.LedgerError, match="no check 'linear_attention.merged.nope_"):
        ledger.load("linear_attention", _write(tmp_path, bad_check))
    first = next(i for i in ok.items for _ in i.closed_forms)
    dropped = first.closed_forms[0]
    text_without = text.replace(f'"{dropped}"', '"linear_attention.merged.no_such_record"')
    with pytest.raises(ledger.LedgerError, match="no_such_record"):
        ledger.load("linear_attention", _write(tmp_path, text_without))
    # a record named by no item at all
    every = "\n".join(line for line in text.splitlines() if dropped not in line or not line.startswith("closed_forms"))
    with pytest.raises(ledger.LedgerError, match="closed forms in no item"):
        ledger.load("linear_attention", _write(tmp_path, every))


def test_cli_prints_counts(capsys):
    assert ledger.main([]) == 0
    out = capsys.readouterr().out
    assert all(t in out for t in TOPICS) and "missing" in out
