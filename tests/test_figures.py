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
