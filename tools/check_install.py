"""Check an installed toolkit as a user gets it: run by ``make check-install`` with the interpreter of a
fresh environment that holds the wheel and the core dependencies only (sympy, mpmath, numpy, scipy,
platformdirs; no torch, matplotlib, dask, pandas or tqdm), from a folder outside the source tree.

It asserts that

* ``python -m theory`` works fully: ``--version``, ``list``, ``show``, ``eval``, ``cite``;
* ``python -m verify list`` lists every check and says which a run here skips and why;
* ``python -m verify all`` runs every check that needs none of the optional packages, skips the
  others with the reason, and passes (exit status 0); ``--workers`` says that it needs dask.

Usage: ``python tools/check_install.py EXPECTED_VERSION`` (exit status 0 when all holds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

OPTIONAL = ("torch", "matplotlib", "dask", "distributed", "pandas", "tqdm")


def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=3600)
    if ok and proc.returncode != 0:
        raise SystemExit(f"FAILED: python -m {' '.join(args)} (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}")
    return proc


def main(version: str) -> None:
    import importlib.util

    here = Path.cwd().resolve()
    source = Path(__file__).resolve().parents[1]
    if here == source or source in here.parents:
        raise SystemExit("run this from outside the source tree (the installed package must be what imports)")
    present = [m for m in OPTIONAL if importlib.util.find_spec(m) is not None]
    if present:
        raise SystemExit(f"not a core-only environment: {present} installed")
    import theory

    if Path(theory.__file__).resolve().parent == source / "theory":
        raise SystemExit(f"theory imports from the source tree ({theory.__file__}), not the installed wheel")

    for cli in ("theory", "verify"):
        out = run(cli, "--version").stdout.split()
        assert out == ["attention-dynamics-theory", version], (cli, out)
    listed = json.loads(run("theory", "list", "--json").stdout)
    assert len(listed) > 100, len(listed)
    value = json.loads(run("theory", "eval", "linear_attention.data.lambda_hat_sq", "--json",
                           '{"Lambda": [1, 0.5], "N": 4}').stdout)["value"]
    assert abs(value[0][0] - 1.625) < 1e-12 and abs(value[1][1] - 0.5) < 1e-12, value
    assert "Printed" in run("theory", "show", "linear_attention.merged.converged_matrix").stdout
    assert "eprint = {2501.16265}" in run("theory", "cite", "linear_attention.merged.sigma").stdout

    checks = json.loads(run("verify", "list", "--json").stdout)
    skipped = {c["id"]: c["skipped_here"] for c in checks if c["skipped_here"]}
    assert skipped and all("torch" in why or "matplotlib" in why or "dask" in why for why in skipped.values())
    assert "will be skipped here" in run("verify", "list").stdout
    proc = run("verify", "scan_snap.h.identities", "--workers", "2", ok=False)
    assert proc.returncode == 2 and "dask" in proc.stderr, proc.stderr

    with tempfile.TemporaryDirectory() as tmp:
        proc = run("verify", "all", "--quiet", "--report", os.path.join(tmp, "report"), ok=False)
        tail = proc.stdout.strip().splitlines()[-3:]
        if proc.returncode != 0:
            raise SystemExit(f"FAILED: python -m verify all (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}")
        results = json.loads(Path(tmp, "report", "results.json").read_text())["results"]
    ran = {r["id"] for r in results if not r["details"].get("skipped")}
    not_run = {r["id"]: r["details"]["skipped"] for r in results if r["details"].get("skipped")}
    assert set(not_run) == set(skipped), (set(not_run) ^ set(skipped))
    assert len(ran) + len(not_run) == len(checks), (len(ran), len(not_run), len(checks))
    print(f"ok: theory {version} from {Path(theory.__file__).parent}; {len(listed)} closed forms; verify all: "
          f"{len(ran)} checks ran and passed, {len(not_run)} skipped (optional packages missing)")
    print("\n".join(tail))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python tools/check_install.py EXPECTED_VERSION")
    main(sys.argv[1])
