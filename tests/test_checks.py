"""Every registered check passes in its quick profile (and so do its negative controls)."""

import pytest

from verify.registry import all_checks, run_check

CHECKS = all_checks()


@pytest.mark.parametrize("chk", CHECKS, ids=[c.id for c in CHECKS])
def test_check_passes_quick_profile(chk):
    why = chk.available()
    if why:
        pytest.skip(why)
    res = run_check(chk, profile="quick", seed=0)
    assert res.error is None, res.error
    for c in res.controls:
        assert c["rejected"], f"negative control not rejected: {c}"
    assert res.passed, (f"{chk.id}: discrepancy {res.discrepancy} > tolerance {res.tolerance} "
                        f"({res.criterion})")


def test_checks_cover_registered_ids():
    import theory

    known = set(theory.ids())
    for c in CHECKS:
        unknown = set(c.covers) - known
        assert not unknown, f"{c.id} covers unregistered ids {unknown}"
