"""Named settings of checks (verify.settings), --set, and sweeps with their validity map (verify.sweep)."""

import csv
import json

import pytest

from verify import cli
from verify.registry import get_check, run_check
from verify.report import report_kind
from verify.settings import Setting, parse_spectrum, resolve

RHO = "localization.rho.mc_gaussian"
EQ10 = "linear_attention.merged.flow_sigmoid_random_init"


@pytest.mark.parametrize("text, eig", [
    ("white", [1.0, 1.0, 1.0]), ("power:1", [1.0, 0.5, 1 / 3]), ("0.1,0.4,0.2", [0.4, 0.2, 0.1]),
    ("POWER:0", [1.0, 1.0, 1.0]),
])
def test_spectrum_language(text, eig):
    spec = parse_spectrum(text)
    assert spec.eigenvalues(None if spec.form == "values" else 3) == pytest.approx(eig)
    assert parse_spectrum(str(spec)) == spec  # the text round-trips
    assert sum(spec.eigenvalues(None if spec.form == "values" else 3, trace=1.0)) == pytest.approx(1.0)


@pytest.mark.parametrize("text", ["red", "power:", "power:-1", "1,0,2", "1,nan", "power:inf"])
def test_bad_spectra_name_the_setting(text):
    with pytest.raises(ValueError, match="^spectrum: "):
        parse_spectrum(text)


def test_setting_kinds_validate_and_name_themselves():
    n = Setting("N", "int", quick=5, full=31, low=1, high=100, doc="context length")
    assert n.validate("1e1") == 10 and n.default("full") == 31
    for bad, msg in (("0", "^N: must be >= 1"), ("2.5", "^N: expected an integer"), (True, "^N: expected"),
                     ("abc", "^N: expected an integer"), ("101", "^N: must be <= 100")):
        with pytest.raises(ValueError, match=msg):
            n.validate(bad)
    d = Setting("d", "ints", quick=(2, 8), full=(2, 8, 32), low=1, doc="dims")
    assert d.validate("2,4") == (2, 4) and d.validate(3) == (3,)
    with pytest.raises(ValueError, match="^kind: "):
        Setting("x", "complex", quick=1, full=1, doc="")
    with pytest.raises(ValueError, match="^x: must be >= 1"):
        Setting("x", "int", quick=0, full=1, low=1, doc="")  # a default outside its own range
    assert resolve((n, d), "quick", {"N": "7"}, "a.b.c") == {"N": 7, "d": (2, 8)}
    with pytest.raises(ValueError, match="^M: a.b.c has no setting 'M' \\(its settings: N, d\\)"):
        resolve((n, d), "quick", {"M": 1}, "a.b.c")


def test_results_record_their_settings():
    r = run_check(get_check(EQ10), seed=0, settings={"w_init": "1e-4"})
    assert r.settings == {"w_init": 1e-4, "N": 31, "D": 4, "H": 8} and r.passed
    default = run_check(get_check(EQ10), seed=0)
    assert default.settings["w_init"] == 1e-3 and default.discrepancy != r.discrepancy


def test_settings_command(capsys):
    assert cli.main(["settings", RHO]) == 0
    out = capsys.readouterr().out
    assert "samples" in out and "2,8,32" in out and "2,8,32,128" in out
    assert cli.main(["settings", "no.such.check"]) == 2
    assert "unknown check" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    ([EQ10, "--set", "w_init=-1"], "error: --set: w_init: must be >= 1e-08"),
    ([EQ10, "--set", "nonsense=1"], "error: --set: no selected check has a setting 'nonsense'"),
    ([EQ10, "--set", "w_init"], "error: --set: expected NAME=VALUE"),
    ([EQ10, "--grid", "w_init=1e-3"], "error: --grid: only with the sweep command"),
    (["sweep", EQ10], "error: sweep: give at least one --grid"),
    (["sweep", EQ10, "--grid", "tau=1,2"], "error: --grid: " + EQ10 + " has no setting 'tau'"),
    (["sweep", EQ10, "--grid", "w_init=1e-3,abc"], "error: w_init: expected a number"),
    (["sweep", EQ10, "--grid", "w_init=1e-3", "--set", "w_init=1e-4"], "error: --grid: w_init is also given"),
    (["scan_snap.speed.gamma_integral", "--set", "K=1,2"],
     "error: --set: K: expected 5 values, one per M (M=30,1000,1000,10000,2), got 2"),
    (["scan_snap.speed.gamma_integral", "--set", "M=30,40", "--set", "K=1,2", "--set", "eta_Y=1,1"],
     "error: --set: eta_Z: expected 2 values, one per M (M=30,40), got 5"),
    (["sweep", "preconditioned_gd.multi_layer.steps_are_kernel_roots", "--grid", "d=3,4"],
     "error: d: expected 6 values, one per n"),
])
def test_bad_settings_on_the_command_line_are_one_line(argv, message, capsys, tmp_path):
    assert cli.main([*argv, "--report", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and len(err.splitlines()) == 1


def test_set_changes_the_run_and_is_recorded(tmp_path, capsys):
    rep = tmp_path / "r"
    assert cli.main([EQ10, "--set", "w_init=1e-4", "--report", str(rep), "--quiet"]) == 0
    [rec] = json.loads((rep / "results.json").read_text())["results"]
    assert rec["settings"]["w_init"] == 1e-4


def test_sweep_writes_table_and_validity_map(tmp_path, capsys):
    """eq. 10 with s_eff from the random start holds at small w_init and fails at large: the sweep's
    ratio crosses 1 between them."""
    rep = tmp_path / "sweep"
    status = cli.main(["sweep", EQ10, "--grid", "w_init=1e-4,1e-3,0.1", "--seeds", "0-1", "--report", str(rep),
                       "--quiet"])
    out = capsys.readouterr().out
    assert status == 1 and "sweep of " + EQ10 in out  # the largest w_init fails, by design
    with open(rep / "sweep.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["w_init"], r["seed"]) for r in table] == [(w, s) for w in ("0.0001", "0.001", "0.1") for s in "01"]
    ratio = {r["w_init"]: float(r["ratio"]) for r in table}
    assert ratio["0.0001"] < ratio["0.001"] < 1 < ratio["0.1"]
    doc = json.loads((rep / "sweep.json").read_text())
    assert doc["grid"] == ["w_init"] and len(doc["rows"]) == 6
    assert (rep / "figures" / "sweep-validity.png").stat().st_size > 1000
    assert report_kind(rep) == "report"  # a sweep's folder is a report: a plain run may replace it
    assert cli.main([EQ10, "--report", str(rep), "--quiet"]) == 0
    assert not (rep / "sweep.csv").exists()
    md = (rep / "report.md").read_text()
    assert EQ10 in md


def test_a_pairing_with_an_undeclared_setting_is_refused_at_registration():
    from verify.registry import check
    from verify.settings import Setting

    with pytest.raises(ValueError, match="^settings: K of tmp.paired.check is paired with 'M', which it does not"):
        check("tmp.paired.check", covers=[], method="symbolic", title="t",
              settings=[Setting("K", "ints", quick=(1,), full=(1,), doc="classes", paired_with="M")])
