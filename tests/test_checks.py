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


def test_check_ids_locate_their_module():
    """``<topic>.<part>.<name>`` lives in ``verify/checks/<topic>/<part>[_<method or subject>].py``;
    the topic-wide checks ``<topic>.<name>`` in ``verify/checks/<topic>/symbolic.py``."""
    import inspect

    misplaced = []
    for chk in all_checks():
        parts = chk.id.split(".")
        module = inspect.unwrap(chk.func).__module__
        if not module.startswith("verify.checks."):
            continue  # registered by a test or a plug-in
        topic, stem = module.split(".")[2:4]
        where = stem == "symbolic" if len(parts) == 2 else (stem == parts[1] or stem.startswith(parts[1] + "_"))
        if topic != parts[0] or not where:
            misplaced.append(f"{chk.id} in {module}")
    assert not misplaced, misplaced


@pytest.mark.parametrize("check_id, model", [
    ("linear_attention.merged.mc_init_norms", "verify.models.linear_attention.MergedLinearAttention"),
    ("linear_attention.separate.mc_init_norms", "verify.models.linear_attention_separate.SeparateLinearAttention")])
def test_init_norm_checks_fail_when_a_zero_block_starts_nonzero(check_id, model, monkeypatch):
    """Eqs. 35/37 checks also require the torch start's zero blocks to be exactly 0: a start that leaves one
    nonzero fails them (the norms' statistics alone would pass)."""
    import importlib

    from verify.registry import get_check

    module, name = model.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    monkeypatch.setattr(cls, "zero_block_norms", lambda self: (1e-3, 0.0))
    res = run_check(get_check(check_id), profile="quick", seed=0, settings={"draws": 100})
    assert res.error is None and not res.passed and res.discrepancy <= res.tolerance
