"""verify.report.write_report on synthetic results: JSON, Markdown and figures."""

import json
import re

import pytest

from verify import report
from verify.registry import CheckResult

ERRATUM_ID = "linear_attention.data.lambda_hat_sq_eq30_line2"


def result(id, passed=True, figures=None, **kw):
    base = dict(id=id, title=f"title of {id}", covers=[ERRATUM_ID], method="monte_carlo",
                profile="quick", seed=0, passed=passed, measured=[[1.0, 0.1], [0.1, 2.0]],
                predicted=[[1.0, 0.0], [0.0, 2.0]], discrepancy=1.3, tolerance=5.3,
                criterion="max |z| over 4 entries < z_crit (family-wise 1e-6)",
                controls=[{"name": "printed eq. 30", "discrepancy": 40.0, "tolerance": 5.3,
                           "rejected": True}],
                details={"samples": 100000}, seconds=0.25, error=None, figures=figures or {})
    base.update(kw)
    return CheckResult(**base)


FIGURES = {
    "loss": {"kind": "lines", "title": "loss against time", "xlabel": "t / tau",
             "ylabel": "loss", "yscale": "log",
             "series": [{"label": "theory", "x": [0, 1, 2, 3], "y": [1.0, 0.5, 0.25, 0.125]},
                        {"label": "simulation", "x": [0, 1, 2, 3], "y": [1.0, 0.52, 0.24, 0.13],
                         "style": "o", "yerr": [0.01, 0.01, 0.01, 0.01]},
                        {"label": "plateau", "x": [0, 3], "y": [0.3, 0.3], "style": "--"}]},
    "matrices": {"kind": "heatmaps", "title": "E[Lhat^2]",
                 "panels": [{"label": "measured", "matrix": [[1.0, 0.1], [0.1, 2.0]]},
                            {"label": "predicted", "matrix": [[1.0, 0.0], [0.0, 2.0]]}]},
}


def synthetic():
    return [
        result("topic_a.part.mc", figures=FIGURES),
        result("topic_a.part.flow", passed=False, method="exact_flow", measured=0.31,
               predicted=0.3, discrepancy=0.03, tolerance=1e-6, criterion="relative error",
               controls=[]),
        result("topic_b.other.crash", passed=False, measured=None, predicted=None,
               discrepancy=float("nan"), tolerance=float("nan"), error="RuntimeError: boom"),
        result("topic_b.other.torch", passed=False, details={"skipped": "needs torch"},
               discrepancy=float("nan"), tolerance=float("nan")),
    ]


def test_write_report_json_markdown_and_figures(tmp_path):
    pytest.importorskip("matplotlib")
    paths = report.write_report(synthetic(), tmp_path / "out", profile="quick", seed=7,
                                device="cpu", seconds=1.5)
    out = tmp_path / "out"
    data = json.loads((out / "results.json").read_text())
    meta = data["metadata"]
    assert meta["seed"] == 7 and meta["profile"] == "quick" and meta["device"] == "cpu"
    for lib in ("python", "numpy", "scipy", "sympy", "mpmath"):
        assert lib in meta["versions"]
    # the source commit when run from a git checkout (None otherwise, e.g. an installed copy)
    commit = report.source_commit()
    assert meta["commit"] == commit
    assert commit is None or re.match(r"^[0-9a-f]{40}(\+dirty)?$", commit)
    assert data["summary"] == {"passed": 1, "failed": 2, "skipped": 1, "seconds": 1.5}
    assert [r["status"] for r in data["results"]] == ["passed", "failed", "failed", "skipped"]
    # strict JSON: a non-finite number is null, and the record says where and which
    assert data["results"][2]["discrepancy"] is None and data["results"][2]["nonfinite"]["discrepancy"] == "nan"
    assert data["schema_version"] == report.SCHEMA_VERSION
    _valid(data)

    everything = sorted(p.name for p in (out / "figures").iterdir())
    # each figure as PNG and SVG, with the numbers behind it as CSV
    assert everything == sorted(f"topic_a.part.mc-{n}.{ext}" for n in ("loss", "matrices")
                                for ext in ("png", "svg", "csv"))
    assert (out / "figures" / "topic_a.part.mc-loss.csv").read_text().startswith("series,x,y,yerr\n")
    assert (out / "figures" / "topic_a.part.mc-matrices.csv").read_text().startswith("panel,row,col,value\n")
    figs = [n for n in everything if n.endswith(".png")]
    assert sorted(p.name for p in paths["figures"]) == figs
    for name in figs:
        assert (out / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    md = (out / "report.md").read_text()
    assert "1 passed, 2 failed, 1 skipped" in md
    assert "## topic_a.part" in md and "## topic_b.other" in md
    assert "(figures/topic_a.part.mc-loss.png)" in md
    assert "printed eq. 30: discrepancy 40 vs tolerance 5.3: rejected" in md
    assert "RuntimeError: boom" in md
    assert "## Errata" in md


def test_errata_lists_covering_checks(tmp_path):
    report.write_report(synthetic(), tmp_path, profile="quick", seed=0, device="cpu",
                        seconds=0.0)
    md = (tmp_path / "report.md").read_text()
    errata = md.split("## Errata", 1)[1]
    assert f"`{ERRATUM_ID}`" in errata
    assert "topic_a.part.mc`](#topic_apartmc): **passed**" in errata


def test_without_matplotlib_figures_are_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "_have_matplotlib", lambda: False)
    paths = report.write_report(synthetic(), tmp_path, profile="full", seed=0, device="cpu",
                                seconds=0.0)
    assert paths["figures"] == []
    assert not (tmp_path / "figures").exists()
    assert "figures/" not in (tmp_path / "report.md").read_text()


def test_bad_figure_spec_is_noted_not_fatal(tmp_path):
    pytest.importorskip("matplotlib")
    bad = {"pie": {"kind": "pie"}, "ragged": {"kind": "lines", "series": [
        {"label": "a", "x": [0, 1, 2], "y": [1, 2]}]}}
    report.write_report([result("topic_a.part.bad", figures=bad)], tmp_path, profile="quick",
                        seed=0, device="cpu", seconds=0.0)
    md = (tmp_path / "report.md").read_text()
    assert "figure not drawn: pie" in md and "figure not drawn: ragged" in md


def test_a_bad_figure_choice_raises_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="^figures_of: expected one of first, all, none, got 'some'$"):
        report.write_report([result("topic_a.part.x")], tmp_path / "r", profile="quick", seed=0,
                            device="cpu", seconds=0.0, figures_of="some")
    assert not (tmp_path / "r").exists()


def test_short_formatting():
    assert report.short(None) == "–"
    assert report.short(0.123456) == "0.1235"
    assert report.short([1.0, 2.0]) == "[1, 2]"
    assert report.short([[1.0, -3.0, 0.0], [0.0, 1.0, 0.0]]) == "2×3 array, max abs 3"


# -- several seeds, partial runs ------------------------------------------------------
def test_format_seeds():
    assert report.format_seeds([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
    assert report.format_seeds([9, 3, 3]) == "3, 9"
    assert report.format_seeds([]) == ""


def test_pass_rates_over_seeds():
    runs = [result("t.a.x", seed=0, discrepancy=0.5, tolerance=1.0),
            result("t.a.y", seed=0, passed=False, discrepancy=float("nan"),
                   tolerance=float("nan"), error="boom"),
            result("t.a.x", seed=1, passed=False, discrepancy=3.0, tolerance=1.0),
            result("t.a.y", seed=1, discrepancy=0.0, tolerance=1.0),
            result("t.a.x", seed=2, discrepancy=0.9, tolerance=1.0)]
    x, y = report.pass_rates(runs)
    assert (x["id"], x["passed"], x["run"], x["failed_seeds"]) == ("t.a.x", 2, 3, [1])
    assert (x["worst_ratio"], x["worst_seed"]) == (3.0, 1)
    assert report.worst_text(x) == "3 (seed 1)" and report.rate_text(x) == "2/3"
    assert y["failed_seeds"] == [0] and report.worst_text(y) == "nan (seed 0)"  # a crash is worst


def test_report_over_several_seeds(tmp_path):
    runs = [result("topic_a.part.mc", seed=s, passed=s != 1) for s in (0, 1, 2)]
    report.write_report(runs, tmp_path, profile="quick", seed=None, device="cpu", seconds=1.0,
                        seeds=[0, 1, 2])
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["metadata"]["seeds"] == [0, 1, 2] and data["metadata"]["seed"] is None
    assert [r["seed"] for r in data["results"]] == [0, 1, 2]
    assert data["pass_rates"][0]["failed_seeds"] == [1]
    md = (tmp_path / "report.md").read_text()
    assert "seeds 0-2" in md and "| `topic_a.part.mc` | 2/3 | 1 |" in md
    assert len(set(re.findall(r'<a id="([^"]+)"', md))) == 3          # one anchor per run
    assert "**passed at 2 of 3 seeds** (failed at seeds 1)" in md.split("## Errata")[1]


def test_partial_report_is_marked(tmp_path):
    report.write_report(synthetic()[:1], tmp_path, profile="quick", seed=0, device="cpu",
                        seconds=1.0, partial=True)
    assert json.loads((tmp_path / "results.json").read_text())["partial"] is True
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# Verification report: PARTIAL (interrupted)")
    assert "**PARTIAL (interrupted): 1 passed, 0 failed in 1.0 s**" in md
    assert report.report_kind(tmp_path) == "partial"


def test_report_folder_kinds_and_refusals(tmp_path):
    assert report.report_kind(tmp_path / "missing") == "missing"
    assert report.report_kind(tmp_path) == "empty"
    report.write_report(synthetic()[1:2], tmp_path / "rep", profile="quick", seed=0,
                        device="cpu", seconds=0.0)
    assert report.report_kind(tmp_path / "rep") == "report"
    (tmp_path / "rep" / "mine.txt").write_text("keep")
    assert report.report_kind(tmp_path / "rep") == "other"
    with pytest.raises(ValueError, match="^out_dir: .* overwrite=True"):
        report.write_report(synthetic(), tmp_path / "rep", profile="quick", seed=0,
                            device="cpu", seconds=0.0)
    report.write_report(synthetic()[:1], tmp_path / "rep", profile="quick", seed=0,
                        device="cpu", seconds=0.0, overwrite=True)
    assert (tmp_path / "rep" / "mine.txt").read_text() == "keep"
    (tmp_path / "afile").write_text("x")
    for bad in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        with pytest.raises(ValueError, match="is a file, not a folder"):
            report.ReportFolder(bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "rep"]  # no staging left


def test_a_report_is_moved_into_place_only_when_complete(tmp_path, monkeypatch):
    report.write_report(synthetic()[1:2], tmp_path / "rep", profile="quick", seed=0,
                        device="cpu", seconds=0.0)
    before = {p.name: p.read_bytes() for p in (tmp_path / "rep").iterdir()}

    def broken(*args, **kw):
        raise RuntimeError("markdown failed")

    monkeypatch.setattr(report, "_markdown", broken)
    with pytest.raises(RuntimeError):
        report.write_report(synthetic(), tmp_path / "rep", profile="quick", seed=0,
                            device="cpu", seconds=0.0)
    assert {p.name: p.read_bytes() for p in (tmp_path / "rep").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]


def test_pass_rates_with_a_zero_tolerance():
    """A count that must be 0 (tolerance 0): a passing run (discrepancy <= 0) has ratio 0."""
    runs = [result("t.a.z", seed=0, discrepancy=-1.0, tolerance=0.0),
            result("t.a.z", seed=1, discrepancy=0.0, tolerance=0.0)]
    (z,) = report.pass_rates(runs)
    assert z["worst_ratio"] == 0.0 and z["failed_seeds"] == []


def _valid(doc):
    """``doc`` against the JSON Schema of results.json (verify/schemas/results.schema.json)."""
    jsonschema = pytest.importorskip("jsonschema")
    from pathlib import Path

    schema = json.loads((Path(report.__file__).parent / "schemas" / "results.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(doc)


def test_log_axis_labels_are_matplotlibs_in_plain_text():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    from matplotlib.ticker import LogFormatterSciNotation

    from verify.report import _plain_log_formatter, _plain_math

    assert _plain_math("$\\mathdefault{10^{-3}}$") == "10⁻³"
    assert _plain_math("$\\mathdefault{2\\times10^{-1}}$") == "2×10⁻¹"
    assert _plain_math("$\\mathdefault{10^{12}}$") == "10¹²"
    assert _plain_math("") == "" and _plain_math("0.5") == "0.5"
    assert _plain_math("$\\alpha^{2}$") == "$\\alpha^{2}$"   # anything else is left to mathtext
    # the same ticks labelled as matplotlib's own formatter, on a wide and on a narrow log range
    for lim in ((1e-3, 1e5), (0.2, 0.9)):
        labels = {}
        for kind in ("plain", "matplotlib"):
            ax = Figure().add_subplot()
            ax.set_yscale("log")
            ax.set_ylim(*lim)
            cls = _plain_log_formatter() if kind == "plain" else LogFormatterSciNotation
            ax.yaxis.set_major_formatter(cls())
            ax.yaxis.set_minor_formatter(cls(labelOnlyBase=False))
            ax.figure.canvas.draw()
            labels[kind] = [bool(t.get_text()) for t in ax.yaxis.get_ticklabels(which="both")]
        assert labels["plain"] == labels["matplotlib"] and any(labels["plain"])


def test_errata_section_lists_only_what_the_run_decided(tmp_path):
    # a run of checks that cover no erratum carries no erratum; a skipped check decides nothing
    plain = [result("topic_a.part.plain", covers=["linear_attention.data.lambda_hat_sq"]),
             result("topic_b.other.torch", details={"skipped": "needs torch"}, passed=False,
                    discrepancy=float("nan"), tolerance=float("nan"))]
    report.write_report(plain, tmp_path / "a", profile="quick", seed=0, device="cpu", seconds=0.0)
    errata = (tmp_path / "a" / "report.md").read_text().split("## Errata", 1)[1]
    assert "###" not in errata and "not run" not in errata
    report.write_report(synthetic(), tmp_path / "b", profile="quick", seed=0, device="cpu", seconds=0.0)
    errata = (tmp_path / "b" / "report.md").read_text().split("## Errata", 1)[1]
    assert errata.count("\n### ") == 1 and f"`{ERRATUM_ID}`" in errata and "not run" not in errata


def _drawn_lines(spec):
    """Draw a lines spec as the report does; return the axes."""
    from matplotlib.figure import Figure

    fig = report._lines(spec, Figure)
    fig.canvas.draw()
    return fig.axes[0]


def test_every_figure_kind_draws_a_legend_entry_per_visible_curve(tmp_path):
    # each figure kind rendered once: the legend names exactly the labelled series, each entry's
    # artist is drawn with finite points inside the axes, one condition's theory and simulation
    # share a colour, and a curve lying on another says so in its legend entry
    pytest.importorskip("matplotlib")
    import numpy as np
    from matplotlib.colors import to_rgba

    t = np.linspace(0.0, 3.0, 20)
    spec = {"kind": "lines", "title": "groups", "xlabel": "t", "ylabel": "loss", "yscale": "log",
            "series": [{"label": "ODE, w=0.1", "x": t.tolist(), "y": np.exp(-t).tolist(), "style": "o", "group": "0.1"},
                       {"label": "eq. 10, w=0.1", "x": t.tolist(), "y": np.exp(-t).tolist(), "group": "0.1"},
                       {"label": "ODE, w=0.01", "x": t.tolist(), "y": np.exp(-2 * t).tolist(), "style": "o",
                        "group": "0.01"},
                       {"label": "eq. 10, w=0.01", "x": t.tolist(), "y": np.exp(-2 * t).tolist(), "group": "0.01"},
                       {"label": "printed, w=0.01", "x": t.tolist(), "y": (np.exp(-2 * t) * 1.0005).tolist(),
                        "style": "--", "group": "0.01"},
                       {"label": "level", "x": [0.0, 3.0], "y": [0.2, 0.2], "style": ":", "color": "gray"},
                       {"label": None, "x": [0.0, 3.0], "y": [0.1, 0.1], "style": ":", "color": "gray"}]}
    ax = _drawn_lines(spec)
    lines = ax.get_lines()
    handles, labels = ax.get_legend_handles_labels()
    assert labels == ["ODE, w=0.1", "eq. 10, w=0.1", "ODE, w=0.01", "eq. 10, w=0.01",
                      "printed, w=0.01 (on 'eq. 10, w=0.01')", "level"]
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == labels
    x0, x1 = ax.get_xlim()
    y0, y1 = ax.get_ylim()
    for h in handles:
        assert h in lines and h.get_visible()
        x, y = (np.asarray(v, dtype=float) for v in h.get_data())
        inside = np.isfinite(x) & np.isfinite(y) & (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)
        assert inside.any(), h.get_label()
        assert h.get_linestyle() not in ("None", "none", "") or h.get_marker() not in ("None", "none", "", None)
    colour = {ln.get_label(): to_rgba(ln.get_color()) for ln in lines}
    assert colour["ODE, w=0.1"] == colour["eq. 10, w=0.1"] != colour["ODE, w=0.01"]
    assert colour["ODE, w=0.01"] == colour["printed, w=0.01 (on 'eq. 10, w=0.01')"]
    on_top = next(ln for ln in lines if ln.get_label().startswith("printed"))
    assert on_top.get_zorder() > lines[3].get_zorder()
    # heat maps: one panel per matrix, each titled, and the figure writes both formats
    heat = {"kind": "heatmaps", "title": "M", "panels": [{"label": "measured", "matrix": [[1.0, 0.5], [0.5, 2.0]]},
                                                          {"label": "predicted", "matrix": [[1.0, 0.4], [0.4, 2.0]]}]}
    from matplotlib.figure import Figure

    fig = report._heatmaps(heat, Figure)
    titled = [a.get_title() for a in fig.axes if a.get_title()]
    assert titled == ["measured", "predicted"]
    files = report.draw_figure(heat)
    assert set(files) == set(report.FIGURE_FORMATS) and all(files.values())
    assert report.draw_figure(heat) == files        # the same figure, the same files (no date, fixed ids)
    assert set(report.draw_figure(spec)) == set(report.FIGURE_FORMATS)


def test_figure_shortcuts_draw_what_matplotlib_draws(monkeypatch):
    # the log axes' in-view locators and the heat maps' cell values kept out of the layout save
    # drawing time only: the same PNG bytes as matplotlib's own LogLocator and every text in the layout
    pytest.importorskip("matplotlib")
    import numpy as np

    t = np.logspace(-1, 4, 30)
    loglog = {"kind": "lines", "title": "decades", "xlabel": "t", "ylabel": "loss", "xscale": "log",
              "yscale": "log", "series": [{"label": "a", "x": t.tolist(), "y": (1 / t).tolist()},
                                          {"label": "b", "x": t.tolist(), "y": (3e-3 * t**0.5).tolist(),
                                           "style": "o"}]}
    rng = np.random.default_rng(0)
    heat = {"kind": "heatmaps", "title": "M", "panels": [{"label": f"layer {k}", "matrix": rng.normal(
        scale=10.0 ** -k, size=(6, 6)).tolist()} for k in range(5)]}
    fast = [report.draw_figure(loglog), report.draw_figure(heat)]
    monkeypatch.setattr(report, "_in_view", lambda locator: locator)
    from matplotlib.text import Text

    monkeypatch.setattr(Text, "set_in_layout", lambda self, v: None)
    assert [report.draw_figure(loglog)[".png"], report.draw_figure(heat)[".png"]] == [f[".png"] for f in fast]
