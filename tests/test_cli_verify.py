"""``python -m verify``: list, running checks by id, exit statuses, the report folder."""

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from verify.registry import Control, Outcome
from verify.report import STORE_FILES

check_mod = importlib.import_module("verify.registry")
cli = importlib.import_module("verify.cli")

REPO = Path(__file__).resolve().parents[1]


def run_module(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "verify", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def temporary_checks():
    """Register checks for one test; remove them afterwards."""
    added = []

    def add(id, func, **kw):
        kw.setdefault("covers", [])
        kw.setdefault("method", "exact_flow")
        kw.setdefault("title", f"temporary check {id}")
        check_mod.check(id, **kw)(func)
        added.append(id)

    cli.registered_checks()  # load the real checks first, so ours come last
    yield add
    for id in added:
        chk = check_mod._CHECKS.pop(id, None)
        for alias in getattr(chk, "aliases", ()):
            check_mod._ALIASES.pop(alias, None)


def _passing(ctx):
    x = float(ctx.rng.normal())
    return Outcome(measured=x, predicted=x, discrepancy=0.0, tolerance=1e-12,
                   criterion="identical values", controls=[Control("shifted", 1.0, 1e-12)])


def _failing(ctx):
    return Outcome(measured=1.0, predicted=2.0, discrepancy=0.5, tolerance=1e-8,
                   criterion="relative error < 1e-8", controls=[Control("wrong", 3.0, 1e-8)])


def test_former_ids_select_the_renamed_check(temporary_checks, capsys):
    temporary_checks("tmp_topic.part.renamed", _passing, aliases=["tmp_topic.method.old_name"])
    registered = cli.registered_checks()
    assert [c.id for c in cli.select(["tmp_topic.method.old_name"], registered)] == ["tmp_topic.part.renamed"]
    assert [c.id for c in cli.select(["tmp_topic.method"], registered)] == ["tmp_topic.part.renamed"]
    assert "'tmp_topic.part.renamed'" in capsys.readouterr().err
    with pytest.warns(FutureWarning, match="is now 'tmp_topic.part.renamed'"):
        assert check_mod.get_check("tmp_topic.method.old_name").id == "tmp_topic.part.renamed"
    with pytest.raises(ValueError, match="registered twice"):
        check_mod.check("tmp_topic.other.check", covers=[], method="exact_flow", title="t",
                        aliases=["tmp_topic.method.old_name"])(_passing)


def test_covers_selects_every_check_of_the_records_under_a_prefix(capsys):
    registered = cli.registered_checks()
    chosen = {c.id for c in cli.covering(["preconditioned_gd.multi_layer"], registered)}
    # the torch checks of those records are selected whatever their own id
    expected = {c.id for c in registered if any(i.startswith("preconditioned_gd.multi_layer.") for i in c.covers)}
    assert chosen == expected and "preconditioned_gd.multi_layer.torch_theorem3_sparse" in chosen
    assert cli.covering(["preconditioned_gd.multi_layer.optimal_steps"], registered)
    assert cli.main(["list", "--covers", "preconditioned_gd.multi_layer.optimal_steps"]) == 0
    listed = capsys.readouterr().out
    assert "steps_are_kernel_roots" in listed and "relu.mc_loss" not in listed
    for argv, message in ((["--covers", "nope"], "--covers: no closed form under 'nope'"),
                          (["all", "--covers", "scan_snap.h"], "--covers: selects the checks itself"),
                          (["--covers", "scan_snap.h", "scan_snap.h.identities"], "--covers: selects"),
                          ([], "command: missing")):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_list_runs():
    proc = run_module("list")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("id") or "no checks registered" in proc.stdout
    for chk in cli.registered_checks():
        assert chk.id in proc.stdout


def test_list_fits_80_columns_filters_by_prefix_and_prints_json(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert cli.main(["list", "linear_attention.separate.torch", "scan_snap.h"]) == 0
    ids = {line.split()[0] for line in capsys.readouterr().out.splitlines()[2:] if line[:1].strip()}
    expected = {c.id for c in cli.registered_checks()
                if c.id.startswith(("linear_attention.separate.torch", "scan_snap.h"))}
    assert ids == expected and len(ids) >= 4
    assert cli.main(["list", "--json", "linear_attention.separate.torch_training"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["id"] == "linear_attention.separate.torch_training" and row["method"] == "torch"
    assert {"name": "R", "kind": "ints", "quick": [1], "full": [1, 2, 4, 8], "low": 1, "high": 64,
            "doc": "ranks R of the key and query matrices (one run each, R <= D)"} in row["settings"]
    assert cli.main(["list", "no_such_topic"]) == 2
    assert capsys.readouterr().err == "error: list: no check id starts with 'no_such_topic'\n"
    assert cli.main(["all", "--json"]) == 2
    assert capsys.readouterr().err.startswith("error: --json: only with list")


def test_version():
    proc = run_module("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("attention-dynamics-theory "), proc


def test_run_one_check_by_id_writes_report(tmp_path):
    """A separate process registers one fast check and runs it as a bare id."""
    script = textwrap.dedent("""
        import sys
        from verify.registry import Control, Outcome, check
        from verify.cli import main

        @check("tmp_topic.cli.fast", covers=[], method="exact_flow", title="fast")
        def fast(ctx):
            return Outcome(1.0, 1.0, 0.0, 1e-12, "identical",
                           controls=[Control("off by one", 1.0, 1e-12)])

        sys.exit(main(sys.argv[1:]))
    """)
    report = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-c", script, "tmp_topic.cli.fast", "--report",
                           str(report), "--seed", "3"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "1 passed, 0 failed" in proc.stdout
    assert "Traceback" not in proc.stderr
    data = json.loads((report / "results.json").read_text())
    assert data["metadata"]["seed"] == 3 and data["metadata"]["profile"] == "quick"
    [rec] = data["results"]
    assert rec["id"] == "tmp_topic.cli.fast" and rec["status"] == "passed"
    assert "tmp_topic.cli" in (report / "report.md").read_text()


@pytest.mark.parametrize("args", [["no.such.check"], ["run"], ["list", "extra"],
                                  ["all", "--seed", "-1"], ["all", "--profile", "huge"],
                                  ["all", "--seed", "abc"], ["all", "--frobnicate"]])
def test_usage_errors_exit_2(args):
    proc = run_module(*args, "--report", "")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    [line] = proc.stderr.splitlines()  # one line, no usage block
    assert line.startswith("error: ")


def test_failing_check_gives_exit_1(temporary_checks, tmp_path, capsys):
    temporary_checks("tmp_topic.cli.fails", _failing)
    temporary_checks("tmp_topic.cli.passes", _passing)
    status = cli.main(["tmp_topic.cli", "--report", str(tmp_path), "--quiet"])
    out = capsys.readouterr().out
    assert status == 1
    assert "1 passed, 1 failed" in out
    assert "FAIL" in out
    data = json.loads((tmp_path / "results.json").read_text())
    assert [r["status"] for r in data["results"]] == ["failed", "passed"]


def test_passing_checks_give_exit_0_with_run_and_progress(temporary_checks, tmp_path, capsys):
    seen = []

    def loops(ctx):
        seen.extend(ctx.iterate(range(3), "inner"))
        return _passing(ctx)

    temporary_checks("tmp_topic.cli.loops", loops)
    assert cli.main(["run", "tmp_topic.cli.loops", "--report", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert seen == [0, 1, 2]
    assert "1 passed, 0 failed" in captured.out
    assert "tmp_topic.cli.loops" in captured.err  # one log line per check (no terminal here)


def test_unavailable_check_is_skipped_not_failed(temporary_checks, tmp_path, capsys):
    temporary_checks("tmp_topic.cli.needs", _failing, needs=["no_such_package_for_tests"])
    assert cli.main(["tmp_topic.cli.needs", "--report", str(tmp_path), "--quiet"]) == 0
    assert "0 passed, 0 failed, 1 skipped" in capsys.readouterr().out
    [rec] = json.loads((tmp_path / "results.json").read_text())["results"]
    assert rec["status"] == "skipped"


def test_zero_checks(tmp_path, capsys):
    status = cli.run_checks([], profile="quick", seed=0, device="cpu", quiet=True,
                            report=str(tmp_path))
    assert status == 0
    assert "0 passed, 0 failed" in capsys.readouterr().out
    assert json.loads((tmp_path / "results.json").read_text())["results"] == []


def test_select_by_id_and_prefix():
    reg = [SimpleNamespace(id=i, aliases=()) for i in ("a.b.x", "a.b.y", "a.bc.z", "c.d.e")]
    assert [c.id for c in cli.select(["a.b"], reg)] == ["a.b.x", "a.b.y"]
    assert [c.id for c in cli.select(["c.d.e", "a.b.y", "a.b"], reg)] == ["a.b.x", "a.b.y",
                                                                          "c.d.e"]
    assert [c.id for c in cli.select(["a.bc.z"], reg)] == ["a.bc.z"]
    with pytest.raises(ValueError, match="^id: "):
        cli.select(["zzz"], reg)


def test_cuda_request_without_cuda_is_usage_error(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    assert cli.main(["all", "--device", "cuda", "--report", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --device")


# -- argparse mistakes: one line naming the option ----------------------------------
@pytest.mark.parametrize("argv, start", [
    ([], "error: command: missing"),
    (["all", "--profile", "bogus"], "error: --profile: invalid choice: 'bogus'"),
    (["all", "--device", "tpu"], "error: --device: invalid choice: 'tpu'"),
    (["all", "--seed", "abc"], "error: --seed: expected an integer >= 0, got 'abc'"),
    (["all", "--seed", "-1"], "error: --seed: must be >= 0"),
    (["all", "--frobnicate"], "error: --frobnicate: unknown option"),
    (["all", "--report"], "error: --report: expected one argument"),
    (["all", "--seed", "1", "--seeds", "2-3"], "error: --seeds: cannot be combined with --seed"),
    (["all", "--seeds", "5-2"], "error: --seeds: descending range '5-2'"),
])
def test_command_line_mistakes_are_one_line(argv, start, capsys):
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith(start), line


# -- --seeds ------------------------------------------------------------------------
@pytest.mark.parametrize("spec, seeds", [
    ("0-19", list(range(20))), ("0,3,5", [0, 3, 5]), ("2-4,9", [2, 3, 4, 9]),
    ("9, 2-4 ,3", [2, 3, 4, 9]), ("7", [7]), ("4-4", [4]), ("3,3,1-3", [1, 2, 3]),
    (str(2**64), [2**64]),
])
def test_parse_seeds(spec, seeds):
    assert cli.parse_seeds(spec) == seeds


@pytest.mark.parametrize("spec, problem", [
    ("", "empty"), ("  ", "empty"), ("0,,3", "empty item"), ("1,", "empty item"),
    ("5-2", "descending range '5-2' (write 2-5)"), ("-1", "must be >= 0"),
    ("0--3", "must be >= 0"), ("1.5", "expected integers or ranges"), ("a-b", "expected"),
    ("0-2-4", "expected"), ("0-20000", "more than 10000 seeds"), ("٣", "expected"),
])
def test_parse_seeds_refuses(spec, problem):
    with pytest.raises(ValueError, match="^--seeds: ") as info:
        cli.parse_seeds(spec)
    assert problem in str(info.value)


def _odd_seeds_fail(ctx):
    """Passes at even seeds (discrepancy 0), fails at odd ones (discrepancy 2 * seed)."""
    x = float(ctx.rng.normal())
    return Outcome(measured=x, predicted=x, discrepancy=2.0 * ctx.seed * (ctx.seed % 2),
                   tolerance=1.0, criterion="even seeds only")


def test_seeds_run_every_check_at_every_seed(temporary_checks, tmp_path, capsys):
    temporary_checks("tmp_topic.seeds.odd", _odd_seeds_fail)
    temporary_checks("tmp_topic.seeds.ok", _passing)
    report = tmp_path / "rep"
    status = cli.main(["tmp_topic.seeds", "--seeds", "0-3", "--report", str(report), "--quiet"])
    out = capsys.readouterr().out
    assert status == 1
    assert "pass rate over seeds 0-3:" in out
    rate_rows = {line.split()[0]: line for line in out.split("pass rate over seeds")[1]
                 .splitlines() if line.startswith("tmp_topic")}
    assert rate_rows["tmp_topic.seeds.odd"].split()[1:5] == ["2/4", "1,", "3", "6"]
    assert rate_rows["tmp_topic.seeds.ok"].split()[1:4] == ["4/4", "-", "0"]
    assert "6 passed, 2 failed (2 checks x 4 seeds)" in out.splitlines()[-1]
    assert "FAIL tmp_topic.seeds.odd (seed 1)" in out

    data = json.loads((report / "results.json").read_text())
    assert data["partial"] is False
    assert data["metadata"]["seeds"] == [0, 1, 2, 3] and data["metadata"]["seed"] is None
    keyed = {(r["id"], r["seed"]): r["status"] for r in data["results"]}
    assert len(keyed) == 8 == len(data["results"])
    assert keyed[("tmp_topic.seeds.odd", 3)] == "failed"
    assert keyed[("tmp_topic.seeds.odd", 2)] == keyed[("tmp_topic.seeds.ok", 3)] == "passed"
    odd = next(e for e in data["pass_rates"] if e["id"] == "tmp_topic.seeds.odd")
    assert (odd["passed"], odd["run"], odd["failed_seeds"], odd["worst_seed"]) == (2, 4, [1, 3], 3)

    md = (report / "report.md").read_text()
    assert "## Pass rate over seeds" in md
    assert "| `tmp_topic.seeds.odd` | 2/4 | 1, 3 | 6 (seed 3) |" in md
    assert "### tmp_topic.seeds.odd (seed 2)" in md


def test_seeds_give_the_same_results_as_seed(temporary_checks, tmp_path, capsys):
    temporary_checks("tmp_topic.seeds.same", _passing)
    cli.main(["tmp_topic.seeds.same", "--seeds", "0,2", "--report", str(tmp_path / "a"),
              "--quiet"])
    cli.main(["tmp_topic.seeds.same", "--seed", "2", "--report", str(tmp_path / "b"), "--quiet"])
    capsys.readouterr()
    many = json.loads((tmp_path / "a" / "results.json").read_text())["results"]
    [one] = json.loads((tmp_path / "b" / "results.json").read_text())["results"]
    assert [r["seed"] for r in many] == [0, 2]
    assert many[1]["measured"] == one["measured"] != many[0]["measured"]


def test_seeds_keep_figures_of_each_seed_apart(temporary_checks, tmp_path, capsys):
    pytest.importorskip("matplotlib")

    def drawn(ctx):
        out = _passing(ctx)
        out.figures = {"line": {"kind": "lines", "series": [
            {"label": "x", "x": [0, 1], "y": [0, ctx.seed]}]}}
        return out

    temporary_checks("tmp_topic.seeds.fig", drawn)
    assert cli.main(["tmp_topic.seeds.fig", "--seeds", "1-2", "--report", str(tmp_path),
                     "--quiet", "--figures", "all"]) == 0
    capsys.readouterr()
    names = sorted(p.name for p in (tmp_path / "figures").iterdir() if p.suffix == ".png")
    assert names == ["tmp_topic.seeds.fig-seed1-line.png", "tmp_topic.seeds.fig-seed2-line.png"]
    assert "(figures/tmp_topic.seeds.fig-seed2-line.png)" in (tmp_path / "report.md").read_text()


def _figure_check(ctx):
    out = _passing(ctx)
    out.figures = {"line": {"kind": "lines", "series": [{"label": "x", "x": [0, 1], "y": [0, ctx.seed]}]}}
    return out


def _figure_files(folder, suffix):
    return sorted(p.name for p in (folder / "figures").iterdir() if p.suffix == suffix)


def test_figures_first_draws_the_first_seed_and_keeps_every_seeds_data(temporary_checks, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    temporary_checks("tmp_topic.seeds.first", _figure_check)
    assert cli.main(["tmp_topic.seeds.first", "--seeds", "3,1,2", "--report", str(tmp_path), "--quiet"]) == 0
    capsys.readouterr()
    # the default: the first seed (seeds run in order: 1) is drawn (PNG and SVG); every seed's numbers
    # are written as CSV
    assert _figure_files(tmp_path, ".png") == ["tmp_topic.seeds.first-seed1-line.png"]
    assert _figure_files(tmp_path, ".svg") == ["tmp_topic.seeds.first-seed1-line.svg"]
    assert _figure_files(tmp_path, ".csv") == [f"tmp_topic.seeds.first-seed{s}-line.csv" for s in (1, 2, 3)]
    assert (tmp_path / "figures" / "tmp_topic.seeds.first-seed2-line.csv").read_text().splitlines()[-1] == "x,1,2,"
    md = (tmp_path / "report.md").read_text()
    assert "(figures/tmp_topic.seeds.first-seed1-line.png)" in md
    assert ("figure not drawn: line (--figures first: only the first seed's runs are drawn); its data: "
            "figures/tmp_topic.seeds.first-seed3-line.csv") in md
    # the store keeps every run's figure: drawing the rest later runs nothing again
    assert cli.main(["tmp_topic.seeds.first", "--seeds", "3,1,2", "--report", str(tmp_path), "--quiet",
                     "--figures", "all", "--resume"]) == 0
    assert "in 0.0 s" in capsys.readouterr().out
    assert _figure_files(tmp_path, ".png") == [f"tmp_topic.seeds.first-seed{s}-line.png" for s in (1, 2, 3)]


def test_figures_none_writes_data_only_and_a_bad_choice_is_one_line(temporary_checks, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    temporary_checks("tmp_topic.seeds.nofig", _figure_check)
    assert cli.main(["tmp_topic.seeds.nofig", "--report", str(tmp_path), "--quiet", "--figures", "none"]) == 0
    assert _figure_files(tmp_path, ".png") == _figure_files(tmp_path, ".svg") == []
    assert _figure_files(tmp_path, ".csv") == ["tmp_topic.seeds.nofig-line.csv"]
    assert "line (--figures none: none are drawn); its data: figures/tmp_topic.seeds.nofig-line.csv" in (
        tmp_path / "report.md").read_text()
    capsys.readouterr()
    assert cli.main(["tmp_topic.seeds.nofig", "--report", "", "--figures", "some"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "--figures" in err and len(err.splitlines()) == 1


# -- the report folder ----------------------------------------------------------------
def snapshot(folder):
    """Every report file under ``folder`` with its bytes (None when the folder is missing). The
    results store (``results.sqlite``) is left out: it records every finished run of every later
    run by design (that is what ``--resume`` reads); the report files must not change."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in STORE_FILES}


@pytest.fixture
def counted(temporary_checks):
    """A passing check that records each run in the returned list."""
    calls = []

    def counted_check(ctx):
        calls.append(ctx.seed)
        return _passing(ctx)

    temporary_checks("tmp_topic.report.counted", counted_check)
    return calls


def _bad_folders(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    (other / "results.json").write_text("{}")  # not a report's results.json
    cases = {"a file": (afile, "is a file, not a folder"),
             "under a file": (afile / "sub", "is a file, not a folder"),
             "other files": (other, "holds files that are not a verify report")}
    if Path("/proc/self").is_dir():
        cases["unwritable"] = (Path("/proc/verify-report-test"), "cannot be written")
    return cases


def test_bad_report_folder_is_refused_before_any_check_runs(counted, tmp_path, capsys):
    for name, (folder, problem) in _bad_folders(tmp_path).items():
        before = snapshot(tmp_path)
        status = cli.main(["tmp_topic.report.counted", "--report", str(folder), "--seeds", "0-2"])
        captured = capsys.readouterr()
        assert status == 2, name
        [line] = captured.err.splitlines()
        assert line.startswith("error: --report: ") and problem in line, (name, line)
        assert counted == [], name          # no check ran
        assert snapshot(tmp_path) == before, name


def test_unwritable_report_folder_is_refused_before_any_check_runs(counted, tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("permissions do not stop root")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert cli.main(["tmp_topic.report.counted", "--report", str(locked / "rep")]) == 2
    finally:
        locked.chmod(0o700)
    assert capsys.readouterr().err.startswith("error: --report: ")
    assert counted == []


def test_overwrite_writes_the_report_next_to_other_files(counted, tmp_path, capsys):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    assert cli.main(["tmp_topic.report.counted", "--report", str(folder), "--quiet"]) == 2
    assert counted == []
    assert cli.main(["tmp_topic.report.counted", "--report", str(folder), "--quiet",
                     "--overwrite"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt", "report.md", "results.json",
                                                        "results.sqlite"]
    assert (folder / "notes.txt").read_text() == "mine"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_a_previous_report_is_replaced_whole(temporary_checks, tmp_path, capsys):
    pytest.importorskip("matplotlib")

    def drawn(ctx):
        out = _passing(ctx)
        out.figures = {"line": {"kind": "lines", "series": [{"x": [0, 1], "y": [1, 2]}]}}
        return out

    temporary_checks("tmp_topic.report.drawn", drawn)
    temporary_checks("tmp_topic.report.plain", _passing)
    assert cli.main(["tmp_topic.report.drawn", "--report", str(tmp_path / "r"), "--quiet"]) == 0
    assert (tmp_path / "r" / "figures" / "tmp_topic.report.drawn-line.png").is_file()
    assert cli.main(["tmp_topic.report.plain", "--report", str(tmp_path / "r"), "--quiet"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["report.md", "results.json", "results.sqlite"]
    [rec] = json.loads((tmp_path / "r" / "results.json").read_text())["results"]
    assert rec["id"] == "tmp_topic.report.plain"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_empty_report_option_writes_nothing(counted, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["tmp_topic.report.counted", "--report", ""]) == 0
    assert "1 passed" in capsys.readouterr().out
    assert counted == [0] and list(tmp_path.iterdir()) == []


# -- Ctrl-C -----------------------------------------------------------------------------
def _interrupt(ctx):
    raise KeyboardInterrupt


def test_ctrl_c_leaves_an_existing_report_untouched(temporary_checks, tmp_path, capsys):
    temporary_checks("tmp_topic.ctrlc.a", _passing)
    temporary_checks("tmp_topic.ctrlc.b", _passing)
    report = tmp_path / "rep"
    assert cli.main(["tmp_topic.ctrlc", "--report", str(report), "--quiet"]) == 0
    before = snapshot(report)
    capsys.readouterr()
    temporary_checks("tmp_topic.ctrlc.c", _interrupt)
    status = cli.main(["tmp_topic.ctrlc", "--report", str(report), "--quiet"])
    captured = capsys.readouterr()
    assert status == 130
    assert snapshot(report) == before                          # byte-identical
    [line] = captured.err.splitlines()
    assert line.startswith("interrupted: ") and "untouched" in line
    assert captured.out.splitlines()[-1].startswith("PARTIAL (interrupted): 2 passed, 0 failed")
    partial = tmp_path / "rep-partial"
    data = json.loads((partial / "results.json").read_text())
    assert data["partial"] is True and len(data["results"]) == 2
    md = (partial / "report.md").read_text()
    assert md.startswith("# Verification report: PARTIAL (interrupted)")
    assert "**PARTIAL (interrupted): 2 passed, 0 failed" in md
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep", "rep-partial"]
    # a second interrupted run replaces the partial report, never the complete one
    assert cli.main(["tmp_topic.ctrlc", "--report", str(report), "--quiet"]) == 130
    capsys.readouterr()
    assert snapshot(report) == before
    assert json.loads((partial / "results.json").read_text())["partial"] is True


def test_ctrl_c_without_a_previous_report_writes_a_partial_one_in_place(
        temporary_checks, tmp_path, capsys):
    temporary_checks("tmp_topic.ctrlc.a", _passing)
    temporary_checks("tmp_topic.ctrlc.b", _interrupt)
    report = tmp_path / "rep"
    assert cli.main(["tmp_topic.ctrlc", "--report", str(report), "--quiet"]) == 130
    capsys.readouterr()
    data = json.loads((report / "results.json").read_text())
    assert data["partial"] is True and [r["id"] for r in data["results"]] == ["tmp_topic.ctrlc.a"]
    # a complete run then replaces the partial report
    assert cli.main(["tmp_topic.ctrlc.a", "--report", str(report), "--quiet"]) == 0
    capsys.readouterr()
    assert json.loads((report / "results.json").read_text())["partial"] is False


def test_ctrl_c_while_drawing_figures_keeps_the_numbers(temporary_checks, tmp_path, monkeypatch,
                                                         capsys):
    report_mod = importlib.import_module("verify.report")

    def drawn(ctx):
        out = _passing(ctx)
        out.figures = {"line": {"kind": "lines", "series": [{"x": [0, 1], "y": [1, 2]}]}}
        return out

    temporary_checks("tmp_topic.ctrlc.drawn", drawn)
    report = tmp_path / "rep"
    report.mkdir()
    (report / "results.json").write_text(json.dumps({"metadata": {}, "results": []}))
    before = snapshot(report)
    monkeypatch.setattr(report_mod, "_have_matplotlib", lambda: True)
    monkeypatch.setattr(report_mod, "_write_figure", lambda files, path: _interrupt(None))
    status = cli.main(["tmp_topic.ctrlc.drawn", "--report", str(report), "--quiet"])
    err = capsys.readouterr().err
    assert status == 130 and "Traceback" not in err and len(err.splitlines()) == 1
    assert snapshot(report) == before
    partial = tmp_path / "rep-partial"
    assert json.loads((partial / "results.json").read_text())["partial"] is True
    assert "figures were not drawn" in (partial / "report.md").read_text()
    assert not (partial / "figures").exists()


def test_ctrl_c_at_start_up_is_one_line(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "registered_checks", interrupted)
    assert cli.main(["all", "--report", ""]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_a_folder_that_changes_during_the_run_keeps_the_new_report_aside(
        temporary_checks, tmp_path, capsys):
    report = tmp_path / "rep"

    def meddling(ctx):  # someone files notes into the report folder while the run goes on
        report.mkdir(exist_ok=True)
        (report / "notes.txt").write_text("mine")
        return _passing(ctx)

    temporary_checks("tmp_topic.report.meddling", meddling)
    assert cli.main(["tmp_topic.report.meddling", "--report", str(report), "--quiet"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --report: cannot replace") and "kept in" in line
    assert sorted(p.name for p in report.iterdir()) == ["notes.txt", "results.sqlite"]
    [aside] = [p for p in tmp_path.iterdir() if p.name.startswith("rep.unsaved-")]
    assert json.loads((aside / "results.json").read_text())["results"][0]["status"] == "passed"
