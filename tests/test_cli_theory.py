"""``python -m theory``: list, show, eval, and one-line errors (exit status 2) on bad input."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

cli = importlib.import_module("theory.cli")

REPO = Path(__file__).resolve().parents[1]
HAT_SQ = "linear_attention.data.lambda_hat_sq"


def run(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "theory", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def eval_value(cf_id, params, *extra):
    proc = run("eval", cf_id, "--json", json.dumps(params), *extra)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["id"] == cf_id
    return out["value"]


def test_list_has_aligned_columns():
    proc = run("list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["id", "status", "title"]
    row = next(line for line in lines if line.startswith(HAT_SQ + " "))
    assert row.split()[:2] == [HAT_SQ, "exact"]
    # the status column starts at the same offset on every line; an id too long for its column
    # stands on a line of its own, its status on the next line
    col = lines[0].index("status")
    for line, after in zip(lines[2:], lines[3:] + [""]):
        if line[col - 2:col] != "  ":
            assert " " not in line and after[:col].strip() == "", line
        else:
            assert line[col] != " ", line


def test_show_prints_expression_latex_and_erratum():
    proc = run("show", "linear_attention.data.lambda_hat_sq_eq30_line2")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for part in ("Parameters", "Lambda:", "N:", "Derived expression", "LaTeX:",
                 "Printed in the paper", "equal to the derived expression: NO", "Erratum"):
        assert part in out, part
    assert "\\operatorname{tr}" in out


def test_eval_eigenvalues_and_full_matrix_agree():
    lam = [1.0, 0.5]
    diag = np.array(eval_value(HAT_SQ, {"Lambda": lam, "N": 5}))
    assert diag.shape == (2, 2)
    assert np.allclose(diag, np.diag(np.diag(diag))) and np.all(np.diag(diag) > 0)
    # the same covariance in a rotated basis: E[Lhat^2] rotates with it
    c, s = np.cos(0.3), np.sin(0.3)
    Q = np.array([[c, -s], [s, c]])
    full = np.array(eval_value(HAT_SQ, {"Lambda": (Q @ np.diag(lam) @ Q.T).tolist(), "N": 5}))
    np.testing.assert_allclose(full, Q @ diag @ Q.T, rtol=1e-12, atol=1e-14)


def test_eval_mpmath_prints_full_precision_strings():
    import mpmath

    # a_d of eqs. 32-33 at lam = tr Lambda = 1 (D = 1): (N + 2)/N = 5/3 for N = 3
    value = eval_value("linear_attention.data.lambda_hat_sq_eigenvalue",
                       {"lam": 1, "trLambda": 1, "N": 3}, "--backend", "mpmath", "--dps", "50")
    assert isinstance(value, str) and len(value.replace(".", "")) == 50
    with mpmath.workdps(60):
        assert abs(mpmath.mpf(value) - mpmath.mpf(5) / 3) < mpmath.mpf(10) ** -48


def test_json_shapes_of_values():
    """Matrices as nested lists, vectors as lists, scalars as numbers (no derivation run)."""
    import mpmath

    assert cli._np_jsonable(np.eye(2)) == [[1.0, 0.0], [0.0, 1.0]]
    assert cli._np_jsonable(np.eye(1)) == [[1.0]]
    assert cli._np_jsonable(np.arange(3.0)) == [0.0, 1.0, 2.0]
    assert cli._np_jsonable(0.5) == 0.5
    assert cli._np_jsonable(np.array([np.nan, np.inf])) == ["nan", "inf"]
    with mpmath.workdps(30):
        third = mpmath.mpf(1) / 3
        assert cli._mp_jsonable(mpmath.matrix([[third]]), 30, "matrix") == [["0." + "3" * 30]]
        assert cli._mp_jsonable(mpmath.matrix([[1], [third]]), 30, "vector") == [
            "1.0", "0." + "3" * 30]
        assert cli._mp_jsonable([third, 2], 30, "vector") == ["0." + "3" * 30, "2.0"]
        assert cli._mp_jsonable(third, 30, "scalar") == "0." + "3" * 30


# -- bad input: one line on stderr naming the parameter, exit status 2 -------------------
BAD = {
    "unknown id": (["eval", "linear_attention.data.nope", "--json", "{}"], "id"),
    "missing parameter": (["eval", HAT_SQ, "--json", '{"Lambda": [1, 0.5]}'], "N"),
    "extra parameter": (["eval", HAT_SQ, "--json", '{"Lambda": [1], "N": 5, "M": 1}'], "M"),
    "wrong shape": (["eval", HAT_SQ, "--json", '{"Lambda": [[1, 0, 0], [0, 1, 0]], "N": 5}'],
                    "Lambda"),
    "not symmetric": (["eval", HAT_SQ, "--json", '{"Lambda": [[1, 0.5], [0, 1]], "N": 5}'],
                      "Lambda"),
    "not positive definite": (["eval", HAT_SQ, "--json", '{"Lambda": [[1, 2], [2, 1]], "N": 5}'],
                              "Lambda"),
    "N < 1": (["eval", HAT_SQ, "--json", '{"Lambda": [1, 0.5], "N": 0}'], "N"),
    "zero scale": (["eval", "linear_attention.data.lambda_hat_sq_eigenvalue", "--json",
                    '{"lam": 0, "trLambda": 1, "N": 3}'], "lam"),
    "negative scale": (["eval", "linear_attention.data.lambda_hat_sq_eigenvalue", "--json",
                        '{"lam": 1, "trLambda": -1, "N": 3}'], "trLambda"),
    "NaN": (["eval", HAT_SQ, "--json", '{"Lambda": [NaN, 1], "N": 5}'], "Lambda"),
    "malformed JSON": (["eval", HAT_SQ, "--json", '{"Lambda": [1, 0.5], "N":'], "--json"),
    "JSON not an object": (["eval", HAT_SQ, "--json", "[1, 0.5]"], "--json"),
}

# more of the same, checked in-process (no interpreter start-up each)
MORE_BAD = {
    "unknown id (show)": (["show", "no.such.id"], "id"),
    "dimension mismatch": (["eval", "linear_attention.data.fourth_moment", "--json",
                            '{"Lambda": [1, 0.5], "A": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]}'], "A"),
    "zero eigenvalue": (["eval", HAT_SQ, "--json", '{"Lambda": [1, 0], "N": 5}'], "Lambda"),
    "empty eigenvalues": (["eval", HAT_SQ, "--json", '{"Lambda": [], "N": 5}'], "Lambda"),
    "N not an integer": (["eval", HAT_SQ, "--json", '{"Lambda": [1, 0.5], "N": 2.5}'], "N"),
    "N NaN": (["eval", HAT_SQ, "--json", '{"Lambda": [1, 0.5], "N": NaN}'], "N"),
    "N a string": (["eval", HAT_SQ, "--json", '{"Lambda": [1, 0.5], "N": "five"}'], "N"),
    "infinite scale": (["eval", "linear_attention.data.lambda_hat_sq_eigenvalue", "--json",
                        '{"lam": Infinity, "trLambda": 1, "N": 3}'], "lam"),
    "no --json": (["eval", HAT_SQ], "Lambda"),
    "JSON a number": (["eval", HAT_SQ, "--json", "5"], "--json"),
    "dps without mpmath": (["eval", HAT_SQ, "--json", '{"Lambda": [1], "N": 2}', "--dps", "30"],
                           "--dps"),
    "dps < 1": (["eval", HAT_SQ, "--json", '{"Lambda": [1], "N": 2}', "--backend", "mpmath",
                 "--dps", "0"], "--dps"),
    "dps > 1000": (["eval", HAT_SQ, "--json", '{"Lambda": [1], "N": 2}', "--backend", "mpmath",
                    "--dps", "1000000"], "--dps"),
    "dps not an integer": (["eval", HAT_SQ, "--json", '{"Lambda": [1], "N": 2}', "--backend",
                            "mpmath", "--dps", "2.5"], "--dps"),
    "dps a word": (["eval", HAT_SQ, "--backend", "mpmath", "--dps", "abc"], "--dps"),
    "backend torch": (["eval", HAT_SQ, "--json", '{"Lambda": [1], "N": 2}', "--backend", "torch"],
                      "--backend"),
    "backend unknown": (["eval", HAT_SQ, "--backend", "bogus"], "--backend"),
    "eval without id": (["eval"], "ID"),
    "show without id": (["show"], "ID"),
    "unknown option": (["eval", HAT_SQ, "--frobnicate"], "--frobnicate"),
    "unknown command": (["evaluate", HAT_SQ], "COMMAND"),
    "no command": ([], "COMMAND"),
    "--json without a value": (["eval", HAT_SQ, "--json"], "--json"),
    "JSON nested too deeply": (["eval", HAT_SQ, "--json", "[" * 100000], "--json"),
    "index 1e30": (["eval", "linear_attention.merged.sigma", "--json",
                    '{"t": 3, "tau": 1, "D": 1e30, "N": 31, "w_init": 0.01}'], "D"),
    "index 10**400": (["eval", "linear_attention.data.lambda_hat_sq", "--json",
                       '{"Lambda": [1, 0.5], "N": 1' + "0" * 400 + "}"], "N"),
    "index 2**64": (["eval", "preconditioned_gd.multi_layer.optimal_steps", "--json",
                     '{"n": 18446744073709551616, "d": 3, "L": 2}'], "n"),
    "index 1e30 into zeta": (["eval", "linear_attention.ntp.saddle_loss", "--json",
                              '{"Lambda": [1, 0.5], "N_max": 1e30, "m": 1}'], "N_max"),
    "empty list for a scalar": (["eval", "linear_attention.merged.sigma", "--json",
                                 '{"t": [], "tau": 1, "D": 4, "N": 31, "w_init": 0.01}'], "t"),
    "empty nested list": (["eval", "linear_attention.merged.sigma", "--json",
                           '{"t": 3, "tau": [[]], "D": 4, "N": 31, "w_init": 0.01}'], "tau"),
    "empty list among matrices": (["eval", "localization.locater.grad_key", "--json",
                                   '{"W_Q": [[1, 0], [0, 1]], "W_K": [[1, 0], [0, 1]], "kappa1": [], '
                                   '"kappa2": 1}'], "kappa1"),
    "shapes do not broadcast": (["eval", "linear_attention.merged.sigma", "--json",
                                 '{"t": [[1, 2], [3, 4]], "tau": [1, 2, 3], "D": 4, "N": 31, '
                                 '"w_init": 0.01}'], "tau"),
    "JSON object as a subset": (["eval", "linear_attention.separate.subset_loss", "--json",
                                 '{"Lambda": [1, 0.5, 0.2], "N": 5, "S": {"3": 0}}'], "S"),
    "boolean in a list": (["eval", HAT_SQ, "--json", '{"Lambda": [true, 0.5], "N": 5}'], "Lambda"),
    "numeric string": (["eval", HAT_SQ, "--json", '{"Lambda": [1, 0.5], "N": "5"}'], "N"),
    "mpmath recursion too long": (["eval", "scan_snap.h.discrete", "--json",
                                   '{"s": 10000000, "M": 30, "eta_Y": 1}', "--backend", "mpmath"],
                                  "s"),
}


@pytest.mark.parametrize("args,param", BAD.values(), ids=BAD.keys())
def test_bad_input_is_one_line_exit_2(args, param):
    proc = run(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {param}: "), lines[0]
    assert proc.stdout == ""


@pytest.mark.parametrize("args,param", MORE_BAD.values(), ids=MORE_BAD.keys())
def test_more_bad_input_in_process(args, param, capsys):
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {param}: "), captured.err
    assert captured.out == ""


def test_help_still_exits_0(capsys):
    assert cli.main(["eval", "-h"]) == 0
    out = capsys.readouterr().out
    assert "--dps DIGITS" in out and "1 to 1000" in out


@pytest.mark.parametrize("cf_id, params, expected", [
    # w_init^2 underflows: eq. 10 at t = 400 tau tends to 1/alpha = 31/36 (it printed "nan")
    ("linear_attention.merged.sigma", {"t": 400, "tau": 1, "D": 4, "N": 31, "w_init": 1e-300}, 31 / 36),
    # Corollary 1 at epsilon = 1e-300: about 1e300 (it printed "inf")
    ("scan_snap.speed.convergence_steps", {"M": 1e9, "K": 1, "eta_Y": 1, "epsilon": 1e-300},
     9.999999995e299),
])
def test_extreme_valid_input_prints_a_finite_value(cf_id, params, expected, capsys):
    assert cli.main(["eval", cf_id, "--json", json.dumps(params)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    value = json.loads(captured.out)["value"]
    assert isinstance(value, float) and value == pytest.approx(expected, rel=1e-14)


def test_dps_at_the_bound_is_accepted(capsys):
    assert cli.main(["eval", "linear_attention.data.lambda_hat_sq_eigenvalue", "--json",
                     '{"lam": 1, "trLambda": 1, "N": 3}', "--backend", "mpmath", "--dps", "1000"]) == 0
    value = json.loads(capsys.readouterr().out)["value"]
    assert value.startswith("1.666666") and len(value) == 1001


@pytest.mark.parametrize("cf_id", __import__("theory").ids())
def test_show_names_the_defining_module_and_a_runnable_example(cf_id, capsys):
    """``show`` says where the record is defined (``theory/<topic>/<part>.py``) and gives an
    ``eval`` command whose output, run as printed, is the value it shows."""
    from theory.papers import topics

    topic, part, _ = cf_id.split(".")
    package = topics()[topic].package  # theory.<topic>, or a plug-in's topic package
    assert cli.main(["show", cf_id, "--no-compare"]) == 0
    out = capsys.readouterr().out
    assert f"defined in: {package}.{part} ({package.replace('.', '/')}/{part}.py:" in out
    example = out[out.index("\nExample\n"):].splitlines()
    command = next(line.strip() for line in example if line.strip().startswith("python -m theory eval"))
    shown = json.loads(next(line.strip() for line in example if line.strip().startswith('{"id"')))
    params = command.split("--json ", 1)[1].strip("'")
    assert cli.main(["eval", cf_id, "--json", params]) == 0
    assert json.loads(capsys.readouterr().out) == shown


def test_show_labels_a_worked_form_as_not_the_papers():
    proc = run("show", "preconditioned_gd.two_layer.optimal_loss")
    assert proc.returncode == 0, proc.stderr
    assert "Worked form (not printed in the paper)" in proc.stdout
    assert "Printed in the paper" not in proc.stdout
