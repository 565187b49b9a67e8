"""The documentation site's generated parts: every closed form on its paper's page with its
checks, the errata page current and every erratum decided by a check; and, in a built site,
every figure a notebook draws shown as an image on its page."""

import os
import re
import sys
from pathlib import Path

import pytest

import theory
from theory.papers import PAPERS, paper_of
from verify import errata
from verify.registry import all_checks

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
    paper = PAPERS[topic]  # the paper is linked and citable from its page
    assert paper.link and paper.link in page.split("## ")[0]
    assert paper.bibtex() in page


def test_the_four_papers_are_linked_and_cite_as_bibtex():
    import re

    for topic, arxiv in {"linear_attention": "2501.16265", "preconditioned_gd": "2306.00297",
                         "localization": "2402.02098", "scan_snap": "2305.16380"}.items():
        paper = PAPERS[topic]
        assert paper.arxiv == arxiv and paper.link == f"https://arxiv.org/abs/{arxiv}"
        entry = theory.bibtex(f"{topic}.anything")
        assert entry.startswith(f"@inproceedings{{{paper.key},") and entry.endswith("}")
        assert f"eprint = {{{arxiv}}}" in entry and entry.count("{") == entry.count("}")
        authors = re.search(r"author = \{(.*)\},", entry).group(1).split(" and ")
        assert [a.split(",")[0] for a in authors] == list(paper.authors)


def test_every_module_has_an_api_page():
    mods = toolkit_pages.modules()
    assert "theory.registry" in mods and "verify.registry" in mods
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
    refuted = [w for c in all_checks() for w, _ in c.refutes]
    assert text.count(f"\n{errata.MEASURED} (") >= len(decided) + len(refuted)
    for c in all_checks():
        for where, _ in c.refutes:
            assert f"### {where}" in text


def test_decides_must_be_covered():
    from verify.registry import check

    with pytest.raises(ValueError, match="^decides:"):
        check("x.y.z", covers=["a"], method="symbolic", title="t", decides=["b"])
    assert all(set(c.decides) <= set(c.covers) for c in all_checks())


NOTEBOOKS = sorted(p for p in (ROOT / "docs" / "notebooks").glob("*.py") if not p.name.startswith("_"))


def test_figures_drawn_counts_figure_calls_in_code_only():
    source = "# %% [markdown]\n# plt.subplots() in prose\n\n# %%\nfig, ax = plt.subplots(1, 2)\n" \
             "plt.figure(); plt.show()\nfor i in range(2):\n    f = plt.subplot_mosaic('AB')\n"
    assert toolkit_pages.figures_drawn(source) == 3
    assert all(toolkit_pages.figures_drawn(p.read_text(encoding="utf-8")) for p in NOTEBOOKS)


def test_built_site_shows_every_figure():
    """Each notebook page of a built site (the folder in DOCS_HTML, e.g. after ``make docs``:
    ``DOCS_HTML=docs/_build/html``) holds one output image per figure its notebook draws.
    ``tests/test_notebooks.py`` checks the same on the executed notebooks in every test run;
    CI runs this one after building the site."""
    site = os.environ.get("DOCS_HTML")
    if not site:
        pytest.skip("set DOCS_HTML to a built site (make docs: docs/_build/html)")
    counts = {}
    for path in NOTEBOOKS:
        page = Path(site) / "notebooks" / f"{path.stem}.html"
        assert page.is_file(), f"{page} is missing"
        images = len(re.findall(r"<img\b[^>]*\bsrc=\"[^\"]*_images/", page.read_text(encoding="utf-8")))
        counts[path.name] = (toolkit_pages.figures_drawn(path.read_text(encoding="utf-8")), images)
    assert all(drawn == images for drawn, images in counts.values()), \
        f"figures drawn vs images on the page: {counts}"
