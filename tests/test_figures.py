"""verify.figures: figure specs built as plain JSON data, drawn by the report."""

import json

import numpy as np
import pytest
import torch

from verify.figures import heatmaps, lines, panel, series
from verify.report import render_figure


def test_specs_are_plain_json_and_render(tmp_path):
    t = np.linspace(0, 1, 5)
    spec = lines("sigma(t)", "t", "sigma", [series("flow", t, t**2), series("eq. 10", torch.tensor(t), t**2,
                                                                           style="--", yerr=0.1 * t)],
                 yscale="log")
    assert json.loads(json.dumps(spec)) == spec and spec["series"][1]["x"] == t.tolist()
    render_figure(spec, tmp_path / "a.png")
    maps = heatmaps("M", [panel("measured", np.eye(2)), panel("predicted", [[1, 0], [0, 1.1]])])
    render_figure(maps, tmp_path / "b.png")
    assert (tmp_path / "a.png").stat().st_size > 1000 and (tmp_path / "b.png").stat().st_size > 1000


@pytest.mark.parametrize("call, message", [
    (lambda: series("a", [0, 1], [0]), "^y: 1 values for 2"),
    (lambda: series("a", [0, 1], [0, 1], style="x"), "^style: "),
    (lambda: series("a", [[0, 1]], [0, 1]), "^x: expected 1 dimension"),
    (lambda: series("a", [0, 1], [0, 1], yerr=[1]), "^yerr: "),
    (lambda: lines("t", "x", "y", [series("a", [0], [0])], xscale="symlog"), "^xscale: "),
    (lambda: lines("t", "x", "y", []), "^curves: "),
    (lambda: panel("p", [1, 2]), "^matrix: expected 2"),
    (lambda: heatmaps("t", []), "^panels: "),
])
def test_bad_specs_name_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_figures_drawn_ahead_are_the_files_the_report_writes(tmp_path, monkeypatch):
    """A run's figures are drawn as it finishes (:func:`verify.report.draw_ahead`); the report then
    only writes them, and a spec that could not be drawn becomes a note of the report."""
    import verify.report as report_mod
    from verify.registry import CheckResult

    t = np.linspace(0, 1, 5)
    res = CheckResult(id="tmp_topic.part.drawn", title="t", covers=[], method="exact_flow", profile="quick",
                      seed=0, passed=True, measured=1.0, predicted=1.0, discrepancy=0.1, tolerance=1.0,
                      criterion="c", controls=[], details={}, seconds=0.1,
                      figures={"ok": lines("sigma", "t", "y", [series("flow", t, t ** 2)]), "bad": {"kind": "pie"}})
    report_mod.draw_ahead(res)
    assert res.drawn["ok"][".png"].startswith(b"\x89PNG\r\n\x1a\n")
    assert res.drawn["ok"][".svg"].lstrip().startswith(b"<?xml")
    assert res.drawn["bad"].startswith("ValueError: kind: expected")
    assert "drawn" not in res.as_json()

    def not_again(spec):
        raise AssertionError("drawn twice")

    monkeypatch.setattr(report_mod, "draw_figure", not_again)
    report_mod.write_files([res], tmp_path, profile="quick", seed=0, device="cpu", seconds=1.0)
    png = tmp_path / "figures" / "tmp_topic.part.drawn-ok.png"
    assert png.read_bytes() == res.drawn["ok"][".png"]
    assert png.with_suffix(".svg").read_bytes() == res.drawn["ok"][".svg"]
    assert png.with_suffix(".csv").is_file()
    assert "bad: ValueError: kind: expected" in (tmp_path / "report.md").read_text()
