"""Sphinx configuration of the documentation site.

Build: ``make docs`` (warnings are errors). Pages per paper, the API reference and the
closed-form tables are generated at build time from the registries by ``_ext/toolkit_pages``;
the jupytext notebooks in ``notebooks/`` are executed by myst-nb (cached). Their figures are
drawn with matplotlib's inline backend, which ``notebooks/_helpers.py`` selects in the kernel,
so that each becomes an image on the page (``MPLBACKEND=Agg`` here would reach the kernel and
turn them into the text ``<Figure size ...>``); ``_ext/toolkit_pages`` fails the build when a
notebook page shows fewer images than its notebook draws figures.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "_ext"))

project = "attention-learning theory toolkit"
author = "the toolkit authors"
copyright = "2026, the toolkit authors"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "toolkit_pages",
]

# Markdown (MyST) pages and jupytext percent notebooks (plain .py files).
source_suffix = {".md": "myst-nb", ".py": "myst-nb"}
nb_custom_formats = {".py": ["jupytext.reads", {"fmt": "py:percent"}]}
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

nb_execution_mode = "cache"
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_cache_path = str(HERE / "_build" / ".jupyter_cache")
nb_merge_streams = True

exclude_patterns = ["_build", "README.md", "notebooks/_helpers.py", "_ext", "conf.py"]

autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_ivar = True

html_theme = "furo"
html_title = "Attention-learning theory toolkit"
suppress_warnings = ["mystnb.unknown_mime_type"]
