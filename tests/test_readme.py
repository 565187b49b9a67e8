"""The README's coverage table is the generated one (python -m verify.coverage)."""

from pathlib import Path

from verify import coverage

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_coverage_table_is_current():
    text = README.read_text()
    assert coverage.section(text) == coverage.table(), "run: python -m verify.coverage README.md"


def test_every_closed_form_has_a_check():
    import theory
    from verify.registry import all_checks

    covered = {i for c in all_checks() for i in c.covers}
    assert not [i for i in theory.ids() if i not in covered]


def test_erratum_flag_matches_symbolic_comparison():
    # the table reads the erratum flag; it must agree with the symbolic verdict
    import theory

    for cf in theory.records():
        if cf.erratum:
            assert cf.printed is not None and not cf.equal(cf.expr, cf.printed_expr), cf.id
