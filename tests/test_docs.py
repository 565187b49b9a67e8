"""The documentation site's generated parts: every closed form on its paper's page with its
checks, the errata page current and every erratum decided by a check."""

import sys
from pathlib import Path

import pytest

import theory
from theory.papers import PAPERS, paper_of
from verify import errata
from verify.check import checks

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import toolkit_pages  # noqa: E402  (the Sphinx extension, importable without Sphinx)


def test_every_closed_form_belongs_to_a_paper():
    for id in theory.ids():
        assert paper_of(id).topic == id.split(".")[0]


@pytest.mark.parametrize("topic", list(PAPERS))
def test_paper_page_lists_every_closed_form_with_its_checks(topic):
    page = toolkit_pages.paper_page(topic)
    ids = [i for i in theory.ids() if i.startswith(topic + ".")]
    for id in ids:
        assert f"## `{id}`" in page, id
    assert "**Checked by:** none" not in page
    assert page.count("**Checked by:**") == len(ids)


def test_every_module_has_an_api_page():
    mods = toolkit_pages.modules()
    assert "theory.registry" in mods and "verify.check" in mods
    assert not [m for m in mods if m.endswith("__main__")]


def test_docstring_filter_escapes_bars_outside_literals_and_turns_headings_into_rubrics():
    lines = ["Notes", "-----", "a |x| b ``|y|`` c"]
    toolkit_pages.plain_text_docstring(lines)
    assert lines == [".. rubric:: Notes", "", r"a \|x\| b ``|y|`` c"]
    table = ["Contains", "--------", "f   does this", "    and that", "", "Text."]
    toolkit_pages.plain_text_docstring(table)
    assert table == [".. rubric:: Contains", "", "::", "", "    f   does this", "        and that", "", "Text."]


def test_every_erratum_has_a_deciding_check():
    generic = ("symbolic_printed_forms", "high_precision")
    for id, deciders in errata.deciding_checks().items():
        assert theory.get(id).erratum, f"{id} is declared decided but has no erratum"
        real = [c for c in deciders if not c.id.endswith(generic)]
        assert real, f"erratum {id} has no deciding check (add it to a check's decides=)"
        assert all(id in c.covers for c in real)


def test_errata_page_is_current():
    text = (ROOT / "docs" / "errata.md").read_text()
    assert errata.strip_measured(text) == errata.strip_measured(errata.page()), \
        "run: python -m verify.errata docs/errata.md --run"


def test_errata_page_carries_measured_numbers_for_every_decided_erratum():
    text = (ROOT / "docs" / "errata.md").read_text()
    decided = [id for id, cs in errata.deciding_checks().items() if cs]
    refuted = [w for c in checks() for w, _ in c.refutes]
    assert text.count(f"\n{errata.MEASURED} (") >= len(decided) + len(refuted)
    for c in checks():
        for where, _ in c.refutes:
            assert f"### {where}" in text


def test_decides_must_be_covered():
    from verify.check import check

    with pytest.raises(ValueError, match="^decides:"):
        check("x.y.z", covers=["a"], method="symbolic", title="t", decides=["b"])
    assert all(set(c.decides) <= set(c.covers) for c in checks())
