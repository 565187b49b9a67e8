"""The notebooks in ``docs/notebooks`` run to completion, show every figure they draw, and are
jupytext percent notebooks.

Each notebook is plain Python (jupytext ``py:percent``) whose cells assert the statements
they make, so executing it is both its execution test and a test of the results it walks
through. It is executed once, the way the documentation build executes it: converted with
jupytext and run cell by cell in a Jupyter kernel (nbclient), with ``MPLBACKEND=Agg`` in the
kernel's environment as a shell or a test run may have it. The executed notebook then tells
how many figures the notebook drew (counted in the kernel) and how many it showed as images
(``image/png`` outputs, what the site renders as ``<img>``); they must be equal.

Executing the notebooks takes minutes, so these two tests are marked ``slow``: ``make
test-notebooks`` runs them (CI does, after building the documentation, which executes every
notebook too).
"""

import os
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (ROOT / "docs" / "notebooks").glob("*.py") if not p.name.startswith("_"))
#: Seconds one notebook may take (each is written to finish in about a minute).
TIMEOUT = 300

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import toolkit_pages  # noqa: E402  (the Sphinx extension: figures_drawn)

#: Run first in the kernel: count every matplotlib figure created from then on.
_COUNT_FIGURES = """\
import matplotlib.figure as _mpl_figure
_figures_created = 0
_figure_init = _mpl_figure.Figure.__init__
def _counting_init(self, *args, **kwargs):
    global _figures_created
    _figures_created += 1
    _figure_init(self, *args, **kwargs)
_mpl_figure.Figure.__init__ = _counting_init
"""
_REPORT = "import sys; print('figures created:', _figures_created); print('prefix:', sys.prefix)"


@cache
def executed(path: Path):
    """``path`` executed in a fresh kernel: ``(notebook, figures created, error or None)``."""
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    from nbformat.v4 import new_code_cell

    nb = jupytext.read(path)
    nb.cells.insert(0, new_code_cell(_COUNT_FIGURES))
    nb.cells.append(new_code_cell(_REPORT))
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # cwd: the notebook's folder, as in the documentation build (notebooks import _helpers).
    client = nbclient.NotebookClient(nb, timeout=TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    error = None
    try:
        client.execute(env=env)
    except Exception as exc:  # a failing cell, a timeout, a dead kernel: reported by the tests
        error = f"{type(exc).__name__}: {exc}"
    last = nb.cells[-1].get("outputs", [])
    report = dict(line.split(": ", 1) for o in last if o.get("output_type") == "stream"
                  for line in o.get("text", "").splitlines() if ": " in line)
    if error is None and report.get("prefix") != sys.prefix:
        error = (f"the kernel ran in {report.get('prefix')}, not in this environment ({sys.prefix}): "
                 "a 'python3' kernelspec elsewhere shadows this environment's ipykernel")
    created = int(report["figures created"]) if "figures created" in report else None
    return nb, created, error


def _outputs(nb):
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]


def test_there_are_notebooks():
    assert NOTEBOOKS, "docs/notebooks holds no *.py notebook"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path):
    nb, _, error = executed(path)
    assert error is None, f"{path.name} stopped with an error\n{error[-6000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_shows_every_figure(path):
    nb, created, error = executed(path)
    if error is not None:
        pytest.skip("the notebook did not run (see test_notebook_runs)")
    outputs = _outputs(nb)
    images = sum("image/png" in o.get("data", {}) for o in outputs)
    figure_texts = [o["data"]["text/plain"] for o in outputs if "image/png" not in o.get("data", {})
                    and "<Figure size" in o.get("data", {}).get("text/plain", "")]
    drawn = toolkit_pages.figures_drawn(path.read_text(encoding="utf-8"))
    assert not figure_texts, f"{path.name}: figures shown as text, not images: {figure_texts}"
    assert created == drawn, (f"{path.name}: {created} figures created in the kernel, "
                              f"{drawn} figure calls in the source")
    assert images == created, f"{path.name}: {created} figures drawn, {images} shown as images"


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
