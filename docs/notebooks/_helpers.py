"""Helpers shared by the derivation notebooks (not a notebook itself).

``show`` typesets an expression in Jupyter and prints it when a notebook runs as a script;
``claim`` prints a verified statement and stops the run when it does not hold; ``record``
fetches a registered closed form and prints its source.

Figures: a notebook draws with pyplot and ends each figure's cell with ``plt.show()``.
Importing this module selects the backend for that: inside Jupyter (the documentation
build, ``jupytext --execute``) the inline backend, so that every figure becomes an image
output, whatever ``MPLBACKEND`` the kernel inherited (with ``Agg``, which a test run or a
shell may set, a figure would show as the text ``<Figure size ...>`` or not at all); as a
script the Agg backend, so scripts draw off-screen.
"""

from __future__ import annotations

import matplotlib
import sympy as sp

import theory


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


IN_NOTEBOOK = _in_notebook()
if IN_NOTEBOOK:
    from IPython import get_ipython

    get_ipython().run_line_magic("matplotlib", "inline")  # figures become image/png outputs
else:
    matplotlib.use("Agg")  # run as a script: draw off-screen, show nothing


def show(label: str, expr, tex: str | None = None) -> None:
    """Typeset ``expr`` in Jupyter; print ``label = expr`` when run as a script."""
    if IN_NOTEBOOK:
        from IPython.display import Math, display

        display(Math(f"{tex or label} = {sp.latex(expr)}"))
    else:
        print(f"{label} = {expr}")


def claim(statement: str, holds) -> None:
    """Print a verified statement; stop the notebook if it does not hold."""
    holds = bool(holds)
    print(f"[{'ok' if holds else 'FAILED'}] {statement}")
    assert holds, statement


def record(id: str):
    """A registered closed form, with its source and status printed."""
    cf = theory.get(id)
    print(f"{cf.id}: {cf.citation} [{cf.status}]")
    return cf
