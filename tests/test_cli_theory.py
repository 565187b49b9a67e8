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
    assert lines[0].split()[:3] == ["id", "status", "source"]
    row = next(line for line in lines if line.startswith(HAT_SQ + " "))
    assert "exact" in row and "Zhang" in row
    # the status column starts at the same offset on every line
    col = lines[0].index("status")
    assert all(line[col - 2:col] == "  " for line in lines[2:])


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
