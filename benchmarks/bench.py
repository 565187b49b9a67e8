"""Timing benchmarks of the toolkit (a script, not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench.py            # a table
    .venv/bin/python benchmarks/bench.py --json     # the same numbers as JSON

Measures

1. ``import theory`` in a fresh interpreter (it must not import sympy);
2. the first ``theory.get(ID)`` plus first evaluation of a record in a fresh interpreter
   (registry load, sympy derivation, emission of the numpy function), and the cached
   evaluation time afterwards;
3. one right-hand-side evaluation of the exact gradient flow of the merged model
   (:func:`verify.flows.merged.rhs`) at ``D = 8 .. 128``, ``H = 8``, and the fitted exponent
   of time vs D (the reduced D x D form costs O(H D^2 + D^3): the exponent must be <= 3);
4. Monte Carlo throughput of the ``E[z z^T]`` estimator (samples per second);
5. torch training steps per second of the merged attention layer, when
   :func:`verify.models.linear_attention.benchmark_steps` is available.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

np = None  # numpy, imported by main() after the BLAS thread count is set

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: Records timed for derivation + emission (cold) and cached evaluation.
RECORDS = {
    "linear_attention.data.lambda_hat_sq": {"Lambda": [0.4, 0.3, 0.2, 0.1], "N": 31},
    "linear_attention.merged.sigma": {"t": 1.0, "tau": 1.0, "D": 4, "N": 31, "w_init": 1e-3},
    "linear_attention.merged.global_min_loss": {"Lambda": [0.4, 0.3, 0.2, 0.1], "N": 31},
}
RHS_DIMS = (8, 16, 32, 64, 128)
RHS_HEADS = 8


def _fresh(code: str) -> dict:
    """Run ``code`` in a fresh interpreter at the repository root; it prints one JSON line."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])})
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_import(repeat: int) -> dict:
    code = ("import time, sys, json; t0 = time.perf_counter(); import theory; "
            "dt = time.perf_counter() - t0; "
            "print(json.dumps({'s': dt, 'sympy_loaded': 'sympy' in sys.modules}))")
    runs = [_fresh(code) for _ in range(repeat)]
    return {"seconds": min(r["s"] for r in runs),
            "sympy_loaded": any(r["sympy_loaded"] for r in runs)}


def bench_records(repeat_cached: int) -> dict:
    out = {}
    for rid, kw in RECORDS.items():
        code = (
            "import time, json, theory\n"
            f"kw = {kw!r}\n"
            "t0 = time.perf_counter(); cf = theory.get(" + repr(rid) + "); t1 = time.perf_counter()\n"
            "cf(**kw); t2 = time.perf_counter()\n"
            f"n = {repeat_cached}\n"
            "t3 = time.perf_counter()\n"
            "for _ in range(n): cf(**kw)\n"
            "t4 = time.perf_counter()\n"
            "print(json.dumps({'get': t1 - t0, 'first_eval': t2 - t1, 'cached': (t4 - t3) / n}))\n"
        )
        out[rid] = _fresh(code)
    return out


def _time_call(fn, min_seconds: float = 0.2) -> float:
    """Seconds per call: best of 3 batches, each at least ``min_seconds`` long."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_seconds:
            break
        n *= 2
    best = dt / n
    for _ in range(2):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def bench_rhs() -> dict:
    from verify.flows import merged as fm

    rng = np.random.default_rng(0)
    times = {}
    for D in RHS_DIMS:
        lam = np.linspace(1.0, 0.1, D)
        f = fm.rhs(fm.moments(lam, 31), None, 1.0)
        y = rng.normal(size=RHS_HEADS * (1 + D * D)) / D
        times[D] = _time_call(lambda: f(0.0, y))
    dims = np.array(RHS_DIMS, dtype=float)
    sec = np.array([times[D] for D in RHS_DIMS])
    slope_all = float(np.polyfit(np.log(dims), np.log(sec), 1)[0])
    slope_top = float(np.polyfit(np.log(dims[-3:]), np.log(sec[-3:]), 1)[0])
    return {"H": RHS_HEADS, "seconds": {str(D): times[D] for D in RHS_DIMS},
            "exponent_all": slope_all, "exponent_largest3": slope_top,
            "exponent_ok": bool(max(slope_all, slope_top) <= 3.0)}


def bench_rhs_separate() -> dict:
    """One right-hand side of the separate-model flow (rank 1, H = D heads), D = 8..128."""
    from verify.flows import separate as fs

    rng = np.random.default_rng(0)
    times = {}
    for D in RHS_DIMS:
        lam = np.linspace(1.0, 0.1, D)
        f = fs.rhs(lam, 31, D, 1, 1.0)
        y = rng.normal(size=D * (1 + 2 * D)) / D
        times[D] = _time_call(lambda: f(0.0, y))
    dims = np.array(RHS_DIMS, dtype=float)
    sec = np.array([times[D] for D in RHS_DIMS])
    slope = float(np.polyfit(np.log(dims), np.log(sec), 1)[0])
    return {"seconds": {str(D): times[D] for D in RHS_DIMS}, "exponent_all": slope,
            "exponent_ok": bool(slope <= 3.0)}


def bench_mc(batch: int = 100_000, D: int = 4, N: int = 31) -> dict:
    """Samples per second of the E[z z^T] estimator: draw, form z, accumulate z z^T."""
    rng = np.random.default_rng(0)
    lam = np.array([0.4, 0.3, 0.2, 0.1])[:D] if D <= 4 else np.linspace(1.0, 0.1, D)
    if importlib.util.find_spec("verify.tasks.in_context_regression") is not None:
        from verify.tasks.in_context_regression import sample_task

        def draw():
            return sample_task(rng, lam, N, batch).z
        source = "verify.tasks.in_context_regression.sample_task"
    else:
        chol = np.sqrt(lam)

        def draw():
            x = rng.standard_normal((batch, N, D)) * chol
            x_q = rng.standard_normal((batch, D)) * chol
            w = rng.standard_normal((batch, D))
            beta = np.einsum("bnd,bn->bd", x, np.einsum("bnd,bd->bn", x, w)) / N
            return (x_q[:, :, None] * beta[:, None, :]).reshape(batch, D * D)
        source = "inline sampler"

    def step():
        z = draw()
        return z.T @ z

    sec = _time_call(step, min_seconds=0.5)
    return {"D": D, "N": N, "batch": batch, "samples_per_second": batch / sec, "sampler": source}


def bench_torch() -> dict | None:
    try:
        mod = importlib.import_module("verify.models.linear_attention")
    except ImportError:
        return None
    fn = getattr(mod, "benchmark_steps", None)
    if fn is None:
        return None
    out = {}
    for D, N, H, batch in ((4, 31, 8, 500), (16, 63, 8, 256)):
        out[f"D={D},N={N},H={H},batch={batch}"] = float(fn(D, N, H, batch, 50, "cpu"))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/bench.py", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--repeat", type=int, default=3, help="fresh interpreters for the import time")
    parser.add_argument("--skip-torch", action="store_true", help="do not time torch training")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="BLAS threads for the numpy timings (default 1: algorithmic scaling, "
                             "not the thread pool's behaviour on a shared machine)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat: must be >= 1")
    if args.blas_threads < 1:
        parser.error("--blas-threads: must be >= 1")
    if "numpy" in sys.modules:
        print("warning: numpy already imported; --blas-threads has no effect", file=sys.stderr)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.blas_threads)
    global np
    import numpy
    np = numpy

    res = {
        "blas_threads": args.blas_threads,
        "import_theory": bench_import(args.repeat),
        "records": bench_records(repeat_cached=200),
        "flow_rhs": bench_rhs(),
        "flow_rhs_separate": bench_rhs_separate(),
        "monte_carlo_zz": bench_mc(),
        "torch_steps_per_second": None if args.skip_torch else bench_torch(),
    }
    if args.json:
        print(json.dumps(res, indent=2))
        return 0

    rows = [("import theory (fresh interpreter)",
             f"{res['import_theory']['seconds'] * 1e3:.1f} ms"
             + ("  (sympy imported!)" if res["import_theory"]["sympy_loaded"] else ""))]
    for rid, r in res["records"].items():
        rows.append((f"{rid}: get", f"{r['get'] * 1e3:.1f} ms"))
        rows.append((f"{rid}: first evaluation (derive + emit)", f"{r['first_eval']:.2f} s"))
        rows.append((f"{rid}: cached evaluation", f"{r['cached'] * 1e6:.0f} us"))
    fr = res["flow_rhs"]
    for D, s in fr["seconds"].items():
        rows.append((f"flow rhs, H={fr['H']}, D={D} ({args.blas_threads} BLAS thread(s))",
                     f"{s * 1e6:.1f} us"))
    rows.append(("flow rhs: fitted exponent of time vs D (all / largest 3)",
                 f"{fr['exponent_all']:.2f} / {fr['exponent_largest3']:.2f}"
                 + ("  (<= 3: ok)" if fr["exponent_ok"] else "  (> 3!)")))
    fs_ = res["flow_rhs_separate"]
    for D, sec in fs_["seconds"].items():
        rows.append((f"separate flow rhs, rank 1, H=D={D}", f"{sec * 1e6:.1f} us"))
    rows.append(("separate flow rhs: fitted exponent of time vs D",
                 f"{fs_['exponent_all']:.2f}" + ("  (<= 3: ok)" if fs_["exponent_ok"] else "  (> 3!)")))
    mc = res["monte_carlo_zz"]
    rows.append((f"Monte Carlo E[zz^T], D={mc['D']}, N={mc['N']} ({mc['sampler']})",
                 f"{mc['samples_per_second']:.3g} samples/s"))
    ts = res["torch_steps_per_second"]
    if ts is None:
        rows.append(("torch SGD steps/s", "n/a"))
    else:
        for k, v in ts.items():
            rows.append((f"torch SGD steps/s ({k})", f"{v:.1f}"))
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0 if fr["exponent_ok"] and fs_["exponent_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
