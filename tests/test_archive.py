"""The archive of full-profile runs (verify.archive) and the records filed in docs/full_profile."""

import json

import pytest

from verify import archive
from verify.check import checks


def _report(tmp_path, profile="full", status="passed", name="rep"):
    d = tmp_path / name
    d.mkdir()
    res = {"id": "linear_attention.separate.rank_plateaus", "title": "a | b", "status": status,
           "passed": status == "passed", "discrepancy": 0.5, "tolerance": 1.0, "seconds": 3.0,
           "criterion": "ratio *within* [0.8, 1.25] | f_m", "error": None,
           "controls": [{"name": "max |x - y|", "discrepancy": 2.0, "tolerance": 1.0,
                         "rejected": True}],
           "measured": {"R=1": [{"ratio": [0.9991234567, 1.0]}]}, "predicted": {"R=1": 1.0}}
    meta = {"date": "2026-01-02T03:04:05+00:00", "profile": profile, "seed": 3, "device": "cpu",
            "cpu_count": 2, "versions": {"torch": "2.13.0+cpu"}, "platform": "not kept"}
    (d / "results.json").write_text(json.dumps({"metadata": meta, "summary": {},
                                                "results": [res]}))
    (d / "figures").mkdir()
    (d / "figures" / f"{res['id']}-{name}.png").write_bytes(b"png " + name.encode())
    (d / "figures" / "another.check-loss.png").write_bytes(b"not this check's")
    return d


def test_archive_round_trip_and_page(tmp_path):
    to = tmp_path / "arch"
    written = archive.archive(_report(tmp_path), to=to, tag="R=1", commit="0123abc")
    assert [p.name for p in written] == ["linear_attention.separate.rank_plateaus.R1-rep.png",
                                         "linear_attention.separate.rank_plateaus.R1.json"]
    (rec,) = archive.load(to)
    assert rec["tag"] == "R=1" and rec["metadata"]["seed"] == 3
    assert "platform" not in rec["metadata"] and rec["metadata"]["commit"] == "0123abc"
    text = archive.page(to)
    assert "| `linear_attention.separate.rank_plateaus` | R=1 | passed | 0.5 | 1 | 3 |" in text
    # Markdown-significant characters of free text are escaped (no broken table, no emphasis)
    assert r"max \|x - y\|" in text and r"\*within\*" in text and r"f\_m" in text
    assert "ratio: [0.999123, 1.0]" in text           # floats shown to 6 digits, lists inline
    fig = "figures/linear_attention.separate.rank_plateaus.R1-rep.png"
    assert rec["figures"] == [fig] and (to / fig).read_bytes() == b"png rep"
    assert f"](../full_profile/{fig})" in text
    # the same check and tag again replaces the record and its figures
    archive.archive(_report(tmp_path, status="failed", name="rep2"), to=to, tag="R=1")
    assert [r["result"]["status"] for r in archive.load(to)] == ["failed"]
    assert sorted(p.name for p in (to / "figures").iterdir()) == [
        "linear_attention.separate.rank_plateaus.R1-rep2.png"]


def test_archive_refuses_quick_runs_and_bad_input(tmp_path):
    with pytest.raises(ValueError, match="^report_dir"):
        archive.archive(_report(tmp_path, profile="quick"), to=tmp_path / "a")
    with pytest.raises(ValueError, match="^report_dir"):
        archive.archive(tmp_path / "missing", to=tmp_path / "a")
    with pytest.raises(ValueError, match="^commit"):
        archive.archive(_report(tmp_path, name="r4"), to=tmp_path / "a", commit="HEAD; rm")
    with pytest.raises(ValueError, match="^tag"):
        archive.archive(_report(tmp_path, name="r3"), to=tmp_path / "a", tag="a/b")
    assert archive.page(tmp_path / "empty").endswith("No full-profile run is archived yet.\n")


def test_filed_records_are_full_profile_runs_of_registered_checks():
    ids = {c.id for c in checks()}
    records = archive.load()
    for rec in records:
        res = rec["result"]
        assert rec["metadata"].get("commit"), rec["id"]      # which code made the record
        assert rec["metadata"]["profile"] == "full" == res["profile"]
        assert rec["id"] == res["id"] and rec["id"] in ids
        # the status agrees with the numbers it was decided from
        ok = (res["discrepancy"] <= res["tolerance"] and res["error"] is None
              and all(c["rejected"] for c in res["controls"]))
        assert (res["status"] == "passed") == ok, rec["id"]
    text = archive.page()
    for rec in records:
        assert f"`{rec['id']}`" in text
        for fig in rec["figures"]:
            assert (archive.ARCHIVE_DIR / fig).is_file()
