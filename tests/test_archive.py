"""The archive of full-profile runs (verify.archive) and the records filed in docs/full_profile."""

import json
import shutil

import pytest

from verify import archive
from verify.registry import all_checks

CHECK = "linear_attention.separate.rank_plateaus"
LEGACY = "linear_attention.separate.torch_training"  # filed with the legacy tags R=1, R=2, ...


def _report(tmp_path, profile="full", status="passed", name="rep", date="2026-01-02T03:04:05+00:00",
            id=CHECK):
    d = tmp_path / name
    d.mkdir()
    res = {"id": id, "title": "a | b", "status": status,
           "passed": status == "passed", "discrepancy": 0.5, "tolerance": 1.0, "seconds": 3.0,
           "criterion": "ratio *within* [0.8, 1.25] | f_m", "error": None,
           "controls": [{"name": "max |x - y|", "discrepancy": 2.0, "tolerance": 1.0,
                         "rejected": True}],
           "measured": {"R=1": [{"ratio": [0.9991234567, 1.0]}]}, "predicted": {"R=1": 1.0}}
    meta = {"date": date, "profile": profile, "seed": 3, "device": "cpu",
            "cpu_count": 2, "versions": {"torch": "2.13.0+cpu"}, "platform": "not kept"}
    (d / "results.json").write_text(json.dumps({"metadata": meta, "summary": {},
                                                "results": [res]}))
    (d / "figures").mkdir()
    (d / "figures" / f"{res['id']}-{name}.png").write_bytes(b"png " + name.encode())
    (d / "figures" / "another.check-loss.png").write_bytes(b"not this check's")
    return d


def _edit(report_dir, change):
    """Rewrite report_dir/results.json as change(doc) (a dict, or text written as is)."""
    path = report_dir / "results.json"
    new = change(json.loads(path.read_text()))
    path.write_text(new if isinstance(new, str) else json.dumps(new))
    return report_dir


def snapshot(folder):
    """Every file under ``folder`` (hidden ones too) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()} if folder.exists() else None


@pytest.fixture
def filed(tmp_path):
    """An archive holding one passing record of CHECK, filed from a 2026-01-02 run."""
    to = tmp_path / "arch"
    archive.archive(_report(tmp_path, name="first"), to=to)
    return to


def test_archive_round_trip_and_page(tmp_path):
    to = tmp_path / "arch"
    written = archive.archive(_report(tmp_path), to=to, tag="R1", commit="0123abc")
    assert [p.name for p in written] == [f"{CHECK}.R1-rep.png", f"{CHECK}.R1.json"]
    (rec,) = archive.load(to)
    assert rec["tag"] == "R1" and rec["metadata"]["seed"] == 3
    assert "platform" not in rec["metadata"] and rec["metadata"]["commit"] == "0123abc"
    text = archive.page(to)
    assert f"| `{CHECK}` | R1 | passed | 0.5 | 1 | 3 |" in text
    # Markdown-significant characters of free text are escaped (no broken table, no emphasis)
    assert r"max \|x - y\|" in text and r"\*within\*" in text and r"f\_m" in text
    assert "ratio: [0.999123, 1.0]" in text           # floats shown to 6 digits, lists inline
    fig = f"figures/{CHECK}.R1-rep.png"
    assert rec["figures"] == [fig] and (to / fig).read_bytes() == b"png rep"
    assert f"](../full_profile/{fig})" in text
    # a later passing run of the same check and tag replaces the record and its figures
    archive.archive(_report(tmp_path, name="rep2", date="2026-02-01T00:00:00+00:00"), to=to,
                    tag="R1")
    assert [r["metadata"]["date"][:10] for r in archive.load(to)] == ["2026-02-01"]
    assert sorted(p.name for p in (to / "figures").iterdir()) == [f"{CHECK}.R1-rep2.png"]
    assert [p.name for p in to.iterdir() if p.name.startswith(".")] == []  # no staging left


def test_archive_refuses_quick_runs_and_bad_input(tmp_path):
    with pytest.raises(ValueError, match="^report_dir"):
        archive.archive(_report(tmp_path, profile="quick"), to=tmp_path / "a")
    with pytest.raises(ValueError, match="^report_dir"):
        archive.archive(tmp_path / "missing", to=tmp_path / "a")
    with pytest.raises(ValueError, match="^commit"):
        archive.archive(_report(tmp_path, name="r4"), to=tmp_path / "a", commit="HEAD; rm")
    with pytest.raises(ValueError, match="^tag"):
        archive.archive(_report(tmp_path, name="r3"), to=tmp_path / "a", tag="a/b")
    assert not (tmp_path / "a").exists()
    assert archive.page(tmp_path / "empty").endswith("No full-profile run is archived yet.\n")


# -- tags ---------------------------------------------------------------------------
@pytest.mark.parametrize("tag, suggestion", [("R=1", "R1"), ("a,b", "a-b")])
def test_tags_that_are_not_file_names_are_refused_with_a_suggestion(tmp_path, tag, suggestion):
    with pytest.raises(ValueError, match=f"^tag: '{tag}' is not allowed.*use '{suggestion}'"):
        archive.archive(_report(tmp_path), to=tmp_path / "arch", tag=tag)
    assert not (tmp_path / "arch").exists()


def test_legacy_tags_refile_under_their_own_tag_and_keep_their_file(tmp_path):
    """docs/full_profile holds records tagged R=1 in <id>.R1.json: R=1 may refile them, R1
    (the same file name) may not take them over."""
    to = tmp_path / "arch"
    shutil.copytree(archive.ARCHIVE_DIR, to)
    before = snapshot(to)
    newer = "2030-01-01T00:00:00+00:00"
    with pytest.raises(ValueError, match=r"^tag: .*R1\.json holds the record .* tag 'R=1'.*"
                                         r"--tag R=1"):
        archive.archive(_report(tmp_path, id=LEGACY, date=newer), to=to, tag="R1")
    assert snapshot(to) == before
    written = archive.archive(_report(tmp_path, id=LEGACY, date=newer, name="rep2"), to=to,
                              tag="R=1")
    assert [p.name for p in written] == [f"{LEGACY}.R1-rep2.png", f"{LEGACY}.R1.json"]
    rec = json.loads((to / f"{LEGACY}.R1.json").read_text())
    assert rec["tag"] == "R=1" and rec["metadata"]["date"] == newer
    assert not (to / "figures" / f"{LEGACY}.R1-loss.png").exists()  # the old figure retired
    assert (to / "figures" / f"{LEGACY}.R2-loss.png").exists()       # other variants kept


def test_a_tag_cannot_take_the_file_of_an_untagged_record(filed, tmp_path):
    # an untagged record lives in <id>.json; no tag maps there, but a record of another
    # tag in the target file is refused whatever the tag
    target = filed / f"{CHECK}.x.json"
    rec = json.loads((filed / f"{CHECK}.json").read_text())
    target.write_text(json.dumps(dict(rec, tag=None)))
    before = snapshot(filed)
    with pytest.raises(ValueError, match="^tag: .* with no tag, and tag 'x' maps to the same"):
        archive.archive(_report(tmp_path, name="later", date="2027-01-01T00:00:00+00:00"),
                        to=filed, tag="x")
    assert snapshot(filed) == before


# -- replacing a filed record -------------------------------------------------------
def test_an_older_run_needs_replace(filed, tmp_path, capsys):
    before = snapshot(filed)
    old = _report(tmp_path, name="old", date="2020-01-01T00:00:00+00:00")
    with pytest.raises(ValueError, match=r"^report_dir: .* is an older run .*--replace"):
        archive.archive(old, to=filed)
    assert archive.main([str(old), "--to", str(filed)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"{CHECK}.json" in err[0] and "older run" in err[0]
    assert snapshot(filed) == before
    assert archive.main([str(old), "--to", str(filed), "--replace"]) == 0
    assert archive.load(filed)[0]["metadata"]["date"].startswith("2020")


def test_a_failing_run_over_a_passing_record_needs_replace(filed, tmp_path):
    before = snapshot(filed)
    failing = _report(tmp_path, name="fails", status="failed",
                      date="2027-01-01T00:00:00+00:00")
    with pytest.raises(ValueError, match=r"failed in this run, and would replace the passing "
                                         r"record .*--replace"):
        archive.archive(failing, to=filed)
    assert snapshot(filed) == before
    archive.archive(failing, to=filed, replace=True)
    assert [r["result"]["status"] for r in archive.load(filed)] == ["failed"]
    # a passing run over a failing record, and the same run again, need nothing
    archive.archive(_report(tmp_path, name="again", date="2027-01-01T00:00:00+00:00"), to=filed)
    archive.archive(tmp_path / "again", to=filed)
    assert [r["result"]["status"] for r in archive.load(filed)] == ["passed"]


# -- bad reports: one error line naming the file, the archive untouched --------------
def _nan_second_result(doc):
    """Two results, the second with a bare NaN (json.dumps writes NaN for float('nan'))."""
    first = dict(doc["results"][0], measured=12345.0)
    second = dict(doc["results"][0], id="linear_attention.merged.large_context_limit",
                  status="failed", passed=False, discrepancy=float("nan"))
    return json.dumps({**doc, "results": [first, second]})


BAD_REPORTS = {
    "not JSON": (lambda doc: "{'metadata': 1}", "is not JSON (Expecting property name"),
    "a JSON list": (lambda doc: [doc], "holds a JSON list, expected an object"),
    "result without id": (lambda doc: {**doc, "results": [{k: v for k, v in doc["results"][0]
                                                          .items() if k != "id"}]},
                          "result 0 has no 'id'"),
    "id with a path": (lambda doc: {**doc, "results": [dict(doc["results"][0], id="../x")]},
                       "not a check id"),
    "NaN in the second result": (_nan_second_result, "is nan (NaN and infinities"),
    "Infinity in the metadata": (lambda doc: json.dumps(
        {**doc, "metadata": dict(doc["metadata"], seed=float("inf"))}), "metadata['seed'] is inf"),
    "passed with a nan discrepancy": (lambda doc: {**doc, "results": [
        dict(doc["results"][0], discrepancy="nan")]}, "is marked passed but its discrepancy"),
    "empty results": (lambda doc: {**doc, "results": []}, "the 'results' list is empty"),
    "missing results": (lambda doc: {"metadata": doc["metadata"]}, "the 'results' list is missing"),
    "only skipped": (lambda doc: {**doc, "results": [dict(doc["results"][0], status="skipped")]},
                     "holds only skipped results"),
    "one check twice": (lambda doc: {**doc, "results": doc["results"] * 2},
                        "are both 'linear_attention.separate.rank_plateaus'"),
}


@pytest.mark.parametrize("case", sorted(BAD_REPORTS))
def test_bad_reports_leave_the_archive_untouched(filed, tmp_path, capsys, case):
    change, message = BAD_REPORTS[case]
    bad = _edit(_report(tmp_path, name="bad", date="2027-01-01T00:00:00+00:00"), change)
    before = snapshot(filed)
    assert archive.main([str(bad), "--to", str(filed)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: report_dir: "), err
    assert str(bad / "results.json") in err[0] and message in err[0], err
    assert snapshot(filed) == before


def test_to_naming_a_file_is_one_error_line(tmp_path, capsys):
    to = tmp_path / "afile"
    to.write_text("mine")
    assert archive.main([str(_report(tmp_path)), "--to", str(to)]) == 2
    assert capsys.readouterr().err == f"error: to: {str(to)!r} is a file, not a folder\n"
    assert archive.main([str(_report(tmp_path, name="r2")), "--to", str(to / "sub")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert to.read_text() == "mine"


def test_several_folders_are_filed_all_or_nothing(filed, tmp_path, capsys):
    good = _report(tmp_path, name="good", date="2027-01-01T00:00:00+00:00",
                   id="linear_attention.merged.large_context_limit")
    bad = _edit(_report(tmp_path, name="bad"), lambda doc: [doc])
    before = snapshot(filed)
    assert archive.main([str(good), str(bad), "--to", str(filed)]) == 2
    assert snapshot(filed) == before
    # two folders filing the same record are refused too
    twin = _report(tmp_path, name="twin", date="2027-01-01T00:00:00+00:00",
                   id="linear_attention.merged.large_context_limit")
    assert archive.main([str(good), str(twin), "--to", str(filed)]) == 2
    assert "would both file" in capsys.readouterr().err
    assert snapshot(filed) == before


def test_a_failure_while_writing_leaves_the_archive_untouched(filed, tmp_path, monkeypatch):
    before = snapshot(filed)
    calls = []

    def flaky_copy(src, dst):
        calls.append(src)
        raise OSError("disk full")

    monkeypatch.setattr(archive.shutil, "copyfile", flaky_copy)
    with pytest.raises(OSError):
        archive.archive(_report(tmp_path, name="new", date="2027-01-01T00:00:00+00:00"),
                        to=filed)
    assert calls and snapshot(filed) == before  # the staging folder is gone too


def test_command_line_mistakes_are_one_line(tmp_path, capsys):
    for argv, word in [([], "report_dir"), (["--bogus", str(tmp_path)], "--bogus"),
                       ([str(tmp_path), "--tag"], "--tag")]:
        assert archive.main(argv) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {word}"), err


# -- the records filed with the project ----------------------------------------------
def test_filed_records_are_full_profile_runs_of_registered_checks():
    ids = {c.id for c in all_checks()}
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
