"""verify.report.write_report on synthetic results: JSON, Markdown and figures."""

import json
import re

import pytest

from verify import report
from verify.check import CheckResult

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
    assert data["results"][2]["discrepancy"] == "nan"  # strict JSON

    figs = sorted(p.name for p in (out / "figures").iterdir())
    assert figs == ["topic_a.part.mc-loss.png", "topic_a.part.mc-matrices.png"]
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


def test_short_formatting():
    assert report.short(None) == "–"
    assert report.short(0.123456) == "0.1235"
    assert report.short([1.0, 2.0]) == "[1, 2]"
    assert report.short([[1.0, -3.0, 0.0], [0.0, 1.0, 0.0]]) == "2×3 array, max abs 3"
