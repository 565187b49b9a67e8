"""Builders for the figure specs a check returns in ``Outcome.figures`` (drawn by
:mod:`verify.report`; the spec format is in its module docstring).

A check states what to draw, as data::

    from verify.figures import lines, series

    figures = {"sigma": lines("sigma(t) from an aligned start", "t/tau", "sigma",
                              [series("flow", t, s), series("eq. 10", t, s_cf, style="--")])}

Arrays (numpy or torch) become lists of floats, so that a spec is plain JSON; a series whose
``x`` and ``y`` differ in length, or a scale other than ``linear``/``log``, raises ``ValueError``
naming the argument.
"""

from __future__ import annotations

import numpy as np

__all__ = ["series", "lines", "panel", "heatmaps"]

STYLES = ("-", "--", ":", "o")
SCALES = ("linear", "log")


def _floats(name: str, values, ndim: int) -> list:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    arr = np.asarray(values, dtype=float)
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension(s), got shape {arr.shape}")
    return arr.tolist()


def series(label: str, x, y, *, style: str = "-", color: str | None = None, yerr=None,
           group: str | None = None) -> dict:
    """One curve: ``y`` against ``x`` (1-d), with an optional style, colour and error bars; ``group``:
    the condition it belongs to (theory and simulation of one condition share a colour)."""
    if style not in STYLES:
        raise ValueError(f"style: expected one of {STYLES}, got {style!r}")
    out = {"label": str(label), "x": _floats("x", x, 1), "y": _floats("y", y, 1), "style": style}
    if len(out["x"]) != len(out["y"]):
        raise ValueError(f"y: {len(out['y'])} values for {len(out['x'])} x values")
    if color is not None:
        out["color"] = color
    if group is not None:
        out["group"] = str(group)
    if yerr is not None:
        out["yerr"] = _floats("yerr", yerr, 1)
        if len(out["yerr"]) != len(out["y"]):
            raise ValueError(f"yerr: {len(out['yerr'])} values for {len(out['y'])} points")
    return out


def lines(title: str, xlabel: str, ylabel: str, curves: list[dict], *, xscale: str = "linear",
          yscale: str = "linear") -> dict:
    """A line plot of ``curves`` (each from :func:`series`)."""
    for name, scale in (("xscale", xscale), ("yscale", yscale)):
        if scale not in SCALES:
            raise ValueError(f"{name}: expected one of {SCALES}, got {scale!r}")
    if not curves:
        raise ValueError("curves: a line plot needs at least one series")
    return {"kind": "lines", "title": title, "xlabel": xlabel, "ylabel": ylabel, "xscale": xscale,
            "yscale": yscale, "series": list(curves)}


def panel(label: str, matrix) -> dict:
    """One heat-map panel: a 2-d array."""
    return {"label": str(label), "matrix": _floats("matrix", matrix, 2)}


def heatmaps(title: str, panels: list[dict]) -> dict:
    """Heat maps side by side on one shared colour scale (each panel from :func:`panel`)."""
    if not panels:
        raise ValueError("panels: expected at least one panel")
    return {"kind": "heatmaps", "title": title, "panels": list(panels)}
