"""``python -m theory list``: 80 columns by default, an id-prefix filter, ``--json``; ``--version``."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

import theory
from theory.cli import main

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def listing(monkeypatch, capsys):
    monkeypatch.delenv("COLUMNS", raising=False)

    def run(*args):
        assert main(["list", *args]) == 0
        return capsys.readouterr().out.splitlines()

    return run


def test_list_fits_80_columns_and_names_every_id(listing):
    lines = listing()
    assert lines[0].split() == ["id", "status", "title"]
    assert max(len(line) for line in lines) <= 80
    ids = {line.split()[0] for line in lines[2:] if line[:1] != " "}
    assert ids == set(theory.ids())
    cf = theory.get("linear_attention.merged.sigma")
    row = next(line for line in lines if line.startswith(cf.id + " "))
    assert row.split()[1] == cf.status
    title = row.split(cf.status, 1)[1].strip()
    assert cf.title.startswith(title.removesuffix("...").rstrip())


def test_list_is_as_wide_as_columns_says(listing, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    lines = listing()
    cf = theory.get("linear_attention.merged.sigma")
    row = next(line for line in lines if line.startswith(cf.id + " "))
    assert row.endswith(" ".join(cf.title.split()))  # not cut


def test_list_filters_by_id_prefix(listing):
    lines = listing("linear_attention.merged")
    ids = [line.split()[0] for line in lines[2:] if line[:1] != " "]
    assert ids == [i for i in theory.ids() if i.startswith("linear_attention.merged")]
    assert ids


def test_list_of_an_unknown_prefix_is_an_error(capsys):
    assert main(["list", "no_such_topic"]) == 2
    assert capsys.readouterr().err.startswith("error: PREFIX: ")


def test_list_json(listing):
    rows = json.loads("\n".join(listing("--json", "preconditioned_gd.single_layer")))
    assert [r["id"] for r in rows] == [i for i in theory.ids() if i.startswith("preconditioned_gd.single_layer")]
    for r in rows:
        cf = theory.get(r["id"])
        assert r == {"id": cf.id, "status": cf.status, "source": cf.source, "citation": cf.citation,
                     "title": cf.title,
                     "params": [{"name": p.name, "kind": p.kind, "doc": p.doc} for p in cf.params]}


def test_version():
    proc = subprocess.run([sys.executable, "-m", "theory", "--version"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["attention-dynamics-theory", version("attention-dynamics-theory")]
