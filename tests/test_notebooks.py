"""The notebooks in ``docs/notebooks`` run to completion and are jupytext percent notebooks.

Each notebook is plain Python (jupytext ``py:percent``) whose cells assert the statements
they make, so running it as a script is both its execution test and a test of the results
it walks through. Figures are drawn with the Agg backend and never written to disk.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (ROOT / "docs" / "notebooks").glob("*.py") if not p.name.startswith("_"))
#: Seconds one notebook may take (each is written to finish in about a minute).
TIMEOUT = 300


def test_there_are_notebooks():
    assert NOTEBOOKS, "docs/notebooks holds no *.py notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path):
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(path)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, (
        f"{path.name} exited with status {proc.returncode}\n"
        f"--- stdout (tail) ---\n{proc.stdout[-4000:]}\n--- stderr (tail) ---\n{proc.stderr[-4000:]}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_jupytext_percent(path):
    jupytext = pytest.importorskip("jupytext")
    from jupytext.formats import guess_format

    text = path.read_text(encoding="utf-8")
    fmt, _ = guess_format(text, ".py")
    assert fmt == "percent", f"{path.name}: jupytext reads it as {fmt!r}, not 'percent'"
    nb = jupytext.read(path)
    kinds = {cell.cell_type for cell in nb.cells}
    assert kinds == {"code", "markdown"}, f"{path.name}: cell types {sorted(kinds)}"
    assert nb.cells[0].cell_type == "markdown", f"{path.name}: should open with a markdown cell"
    formats = nb.metadata.get("jupytext", {}).get("formats")
    assert formats == "py:percent", f"{path.name}: header formats is {formats!r}"
