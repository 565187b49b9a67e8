"""The package's metadata: one version, the license shipped, the citation file and the changelog in
step with the code, and the optional dependencies really optional (the command lines without them).

The wheel itself, installed with the core dependencies only, is exercised by ``make check-install``
(``tools/check_install.py``), which CI runs."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import theory

REPO = Path(__file__).resolve().parents[1]
OPTIONAL = ("torch", "matplotlib", "dask", "distributed", "pandas", "tqdm")


def test_the_version_is_written_once():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "theory._version.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", theory.__version__)
    hits = [p for p in (*REPO.glob("theory/**/*.py"), *REPO.glob("verify/**/*.py"))
            if f'"{theory.__version__}"' in p.read_text()]
    assert hits == [REPO / "theory" / "_version.py"], hits


def test_build_requirement_and_license_match_the_metadata():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    # PEP 639 (an SPDX license string with license-files) needs setuptools >= 77
    assert project["build-system"]["requires"] == ["setuptools>=77"]
    assert project["project"]["license"] == "MIT" and project["project"]["license-files"] == ["LICENSE"]
    assert (REPO / "LICENSE").read_text().startswith("MIT License")
    assert project["project"]["authors"] and project["project"]["classifiers"] and project["project"]["urls"]


def test_citation_file_matches_the_code():
    yaml = pytest.importorskip("yaml")
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["license"] == "MIT"
    assert str(cff["version"]) == theory.__version__
    cited = {ref["identifiers"][0]["value"].removeprefix("arXiv:"): ref for ref in cff["references"]}
    for topic in ("linear_attention", "preconditioned_gd", "localization", "scan_snap"):
        paper = theory.PAPERS[topic]
        ref = cited[paper.arxiv]
        assert ref["title"] == paper.title and ref["year"] == paper.year
        assert [a["family-names"] for a in ref["authors"]] == list(paper.authors)


def test_changelog_starts_with_this_version():
    text = (REPO / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", text, flags=re.M)
    assert versions and versions[0] == theory.__version__, versions


def _without_optional(*args: str) -> subprocess.CompletedProcess:
    """``python -m <args>`` in a process where the optional packages cannot be imported."""
    code = ("import sys, runpy\n"
            f"for m in {OPTIONAL!r}: sys.modules[m] = None\n"
            f"sys.argv = {list(args)!r}\n"
            f"runpy.run_module({args[0]!r}, run_name='__main__', alter_sys=True)\n")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_command_lines_work_without_the_optional_packages(tmp_path):
    from verify.registry import all_checks

    proc = _without_optional("verify", "list")
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[0] for line in proc.stdout.splitlines()[2:] if line and not line[0].isspace()]
    torch_checks = [c.id for c in all_checks() if "torch" in c.needs]
    assert torch_checks and all(c.id in proc.stdout for c in all_checks() if len(c.id) < 40)
    assert "skipped here (needs the optional package 'torch')" in proc.stdout
    assert all(cid in proc.stdout.split("skipped here", 1)[1] for cid in torch_checks)
    assert listed
    proc = _without_optional("verify", torch_checks[0], "scan_snap.h.identities", "--report", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"skipped {torch_checks[0]}: needs the optional package 'torch'" in proc.stdout
    proc = _without_optional("verify", "scan_snap.h.identities", "--workers", "2")
    assert proc.returncode == 2 and "dask" in proc.stderr
    proc = _without_optional("theory", "eval", "linear_attention.data.lambda_hat_sq", "--json",
                             '{"Lambda": [1, 0.5], "N": 4}')
    assert proc.returncode == 0 and "1.625" in proc.stdout, proc.stderr
