"""``python -m verify``: list, running checks by id, exit statuses, the report folder."""

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from verify.check import Control, Outcome

check_mod = importlib.import_module("verify.check")  # the module (verify.check is also a function)
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
        check_mod._CHECKS.pop(id, None)


def _passing(ctx):
    x = float(ctx.rng.normal())
    return Outcome(measured=x, predicted=x, discrepancy=0.0, tolerance=1e-12,
                   criterion="identical values", controls=[Control("shifted", 1.0, 1e-12)])


def _failing(ctx):
    return Outcome(measured=1.0, predicted=2.0, discrepancy=0.5, tolerance=1e-8,
                   criterion="relative error < 1e-8", controls=[Control("wrong", 3.0, 1e-8)])


def test_list_runs():
    proc = run_module("list")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("id") or "no checks registered" in proc.stdout
    for chk in cli.registered_checks():
        assert chk.id in proc.stdout


def test_run_one_check_by_id_writes_report(tmp_path):
    """A separate process registers one fast check and runs it as a bare id."""
    script = textwrap.dedent("""
        import sys
        from verify.check import Control, Outcome, check
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
                                  ["all", "--seed", "-1"], ["all", "--profile", "huge"]])
def test_usage_errors_exit_2(args):
    proc = run_module(*args, "--report", "")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr


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
    reg = [SimpleNamespace(id=i) for i in ("a.b.x", "a.b.y", "a.bc.z", "c.d.e")]
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
