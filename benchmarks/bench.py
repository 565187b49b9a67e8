"""Timing benchmarks of the toolkit (a script, not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench.py            # a table
    .venv/bin/python benchmarks/bench.py --json     # the same numbers as JSON
    .venv/bin/python benchmarks/bench.py --fig4-ranks 1,2,4,8   # all Fig.-4 ranks (minutes)

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
   :func:`verify.models.linear_attention.benchmark_steps` is available;
6. the cost of reproducing the Fig.-4 loss trajectories of the separate key/query model
   (§4-5; ``D = 8``, ``N = 31``, ``H = 9``, ``lambda_d`` proportional to ``1/d`` with trace 1,
   random eigenvectors, eq.-36 start at ``w_init = 0.02``, as in the full profile of
   ``linear_attention.separate.torch_training``) in two ways: the exact expected-loss flow
   (:func:`verify.flows.separate.integrate`, LSODA, ``rtol = 1e-10``) from ``t = 0`` to the
   last drop (the first crossing of the midpoint between ``L(M_{D-1})`` and ``L(M_D)``, eq.
   19), timed; and torch online SGD of :class:`verify.models.linear_attention_separate.
   SeparateLinearAttention` (:func:`verify.models.linear_attention.train_online_sgd`,
   ``eta = 0.5``, batch 4000, one thread), whose steps per second over a short run are
   projected to the ``t_last / (2 eta)`` steps needed to reach the same ``t / tau``. Rank 1 by
   default; ``--fig4-ranks 1,2,4,8`` adds the other panels (``--fig4-ranks`` alone means
   those four).
7. the cost of one Adam step of the GD++ full profile (``preconditioned_gd.gdpp.torch_theorem4``:
   ``d = 5``, ``n = 20``, ``L = 3``, batch 20000, float32): sampling the prompts, and the loss
   with its gradient three ways -- the whole token matrix through every layer
   (:meth:`LinearTransformer.forward`), the Gram recursion of
   :meth:`LinearTransformer.predict`, and the same under ``torch.compile`` (after a warm-up
   that compiles it).
8. with ``--quick-profile``: the wall time of ``python -m verify all`` (quick profile, seed 0)
   run serially and with ``--workers 2`` (each in a fresh interpreter, a fresh report folder),
   and their ratio; with ``--quick-profile --seeds N``, the same for seeds ``0..N-1``;
   ``--only-quick-profile`` times that alone; ``--write-timings`` also writes the serial run's
   seconds per check to ``verify/timings.json``, the order in which a first Dask run starts its
   tasks (longest first; :func:`verify.execute.task_priority`).
9. a cold ``python -m theory eval`` of a record with the derivation cache warm and with it off;
10. ``linear_attention.merged.sigma`` on a grid of 10^4 times: one call on the array against a
    loop of calls;
11. ``linear_attention.separate.saddle_loss`` (eq. 19) over a stack of 1,000 covariances: one call
    on the stack against a loop of calls, in evaluations per second.
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
#: Fig.-4 setting (the full profile of ``linear_attention.separate.torch_training``).
FIG4 = {"D": 8, "N": 31, "H": 9, "w_init": 2e-2, "eta": 0.5, "batch": 4000, "dtype": "float32"}
FIG4_ALL_RANKS = (1, 2, 4, 8)


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
        times[D] = _time_call(lambda f=f, y=y: f(0.0, y))
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
        times[D] = _time_call(lambda f=f, y=y: f(0.0, y))
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


def _fig4_last_drop(Lam, N, v0, k0, q0, levels, horizon: float = 1e5, grow: float = 10.0,
                    max_horizon: float = 1e9) -> tuple[float, float]:
    """Last drop time of the exact flow, found by integrating over a growing horizon.

    Returns ``(t_last, seconds spent searching)``; the drop time is refined on the dense
    output (:func:`verify.flows.separate.first_crossing` with ``brentq``).
    """
    from verify.flows import separate as fs

    t0 = time.perf_counter()
    while True:
        grid = np.concatenate([[0.0], np.geomspace(1.0, horizon, 2000)])
        flow = fs.integrate(Lam, N, v0, k0, q0, t_eval=grid, method="LSODA", rtol=1e-10,
                            dense=True)
        t_last = fs.plateaus(flow.t, flow.loss, levels, func=flow.loss_at).drop_times[-1]
        if np.isfinite(t_last) or horizon >= max_horizon:
            return float(t_last), time.perf_counter() - t0
        horizon *= grow


def bench_fig4(ranks=(1,), seed: int = 0, steps: int = 200, batch: int = FIG4["batch"],
               torch_too: bool = True, device: str = "cpu") -> dict:
    """Exact flow vs torch online SGD for the Fig.-4 trajectories (separate model, rank R).

    For each rank: one eq.-36 draw (:func:`verify.flows.separate.init_separate`); the last
    drop time ``t_last`` of the exact flow (searched over a growing horizon, not timed); the
    timed integration from 0 to ``1.001 t_last`` (2001 output times, geometric); torch steps per
    second from the same start (5 warm-up steps, then ``steps`` timed steps, population loss
    logged every 20 steps as in the full profile); the projected torch time
    ``ceil(t_last / (2 eta)) / (steps/s)`` and its ratio to the flow's time.
    """
    import theory
    from verify.flows import separate as fs
    from verify.tasks.in_context_regression import random_covariance

    D, N, H, w_init, eta = FIG4["D"], FIG4["N"], FIG4["H"], FIG4["w_init"], FIG4["eta"]
    rng = np.random.default_rng(seed)
    eig = 1.0 / np.arange(1, D + 1)
    eig = eig / eig.sum()
    Lam = random_covariance(rng, eig)
    saddle = theory.get("linear_attention.separate.saddle_loss")
    levels = np.array([float(saddle(Lambda=Lam, N=N, m=m)) for m in range(D + 1)])
    out = {"D": D, "N": N, "H": H, "w_init": w_init, "eta": eta, "batch": batch,
           "dtype": FIG4["dtype"],
           "torch_steps_timed": steps, "seed": seed, "device": device, "per_rank": {}}
    for R in ranks:
        v0, k0, q0 = fs.init_separate(rng, H, R, D, w_init)
        t_last, search_s = _fig4_last_drop(Lam, N, v0, k0, q0, levels)
        r = {"t_last": t_last, "search_seconds": search_s}
        if np.isfinite(t_last):
            # 0.1 % past the drop, so the last mid-level crossing is inside the record
            grid = np.concatenate([[0.0], np.geomspace(1.0, 1.001 * t_last, 2000)])
            t0 = time.perf_counter()
            flow = fs.integrate(Lam, N, v0, k0, q0, t_eval=grid, method="LSODA", rtol=1e-10)
            r["flow_seconds"] = time.perf_counter() - t0
            r["flow_nfev"] = flow.nfev
            r["flow_drops"] = int(np.sum(np.isfinite(fs.plateaus(flow.t, flow.loss,
                                                                 levels).drop_times)))
            r["torch_steps_needed"] = int(np.ceil(t_last / (2.0 * eta)))
        if torch_too:
            import torch

            from verify.models.linear_attention import train_online_sgd
            from verify.models.linear_attention_separate import SeparateLinearAttention

            gen = torch.Generator(device=device)
            gen.manual_seed(seed)
            att = SeparateLinearAttention(D, H, R, N, device=device,
                                          dtype=getattr(torch, FIG4["dtype"])).init_(gen, w_init)
            att.load_(v0, k0, q0)
            kw = {"eta": eta, "batch": batch, "generator": gen, "device": device, "log_every": 20}
            train_online_sgd(att, Lam, N, steps=5, **kw)          # warm-up
            run = train_online_sgd(att, Lam, N, steps=steps, **kw)
            r["torch_steps_per_second"] = steps / run.seconds
            if "torch_steps_needed" in r:
                r["torch_projected_seconds"] = r["torch_steps_needed"] / r["torch_steps_per_second"]
                r["ratio_torch_over_flow"] = r["torch_projected_seconds"] / r["flow_seconds"]
        out["per_rank"][str(R)] = r
    return out


#: GD++ full-profile setting (``preconditioned_gd.gdpp.torch_theorem4``).
GDPP = {"d": 5, "n": 20, "L": 3, "batch": 20000, "dtype": "float32"}


def bench_gdpp(steps: int = 10, threads: int | None = None) -> dict | None:
    """Seconds per GD++ training step: sampling, and loss + gradient three ways."""
    try:
        import torch

        from verify.models.linear_transformer import LinearTransformer, sample_tokens_torch
        from verify.tasks.preconditioned_gd import EXPERIMENT_EIGENVALUES
    except ImportError:
        return None
    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        d, n, L, batch = GDPP["d"], GDPP["n"], GDPP["L"], GDPP["batch"]
        dtype = getattr(torch, GDPP["dtype"])
        g = torch.Generator().manual_seed(0)
        model = LinearTransformer(d, L, "gdpp", dtype=dtype).init_(g, 0.1)
        chol = torch.as_tensor(np.diag(np.sqrt(EXPERIMENT_EIGENVALUES)), dtype=dtype)

        def sample():
            return sample_tokens_torch(None, n, batch, generator=g, chol=chol)

        data = sample()

        def full_tokens(Z, y):
            return torch.mean((-model(Z)[:, d, -1] - y) ** 2)

        def gram(Z, y):
            return torch.mean((model.predict(Z) - y) ** 2)

        out = {"threads": torch.get_num_threads(), "steps": steps,
               "sample": _time_call(sample, min_seconds=0.5)}
        for name, fn in (("full token forward", full_tokens), ("Gram recursion", gram),
                         ("Gram recursion, torch.compile", torch.compile(gram))):
            def step(fn=fn):
                model.zero_grad(set_to_none=True)
                fn(data.Z, data.y_q).backward()

            t0 = time.perf_counter()
            step()                                               # warm-up (compiles)
            warm = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            out[name] = (time.perf_counter() - t0) / steps
            if "compile" in name:
                out["compile seconds"] = warm
        return out
    finally:
        torch.set_num_threads(old)


def _parse_ranks(text: str) -> tuple[int, ...]:
    try:
        ranks = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ranks, got {text!r}") from None
    if not ranks or any(R < 1 or R > FIG4["D"] for R in ranks):
        raise argparse.ArgumentTypeError(f"ranks must be in 1..{FIG4['D']}, got {text!r}")
    return ranks


def _duration(sec: float) -> str:
    return f"{sec:.3g} s" if sec < 600 else f"{sec:.3g} s ({sec / 3600:.2g} h)"


def bench_quick_profile(seeds: int = 1, write_timings: bool = False) -> dict:
    """Wall times of the quick profile, serially and on --workers 2 (fresh interpreters, fresh report
    folders). ``write_timings``: the serial run's seconds per check (seed 0) become
    ``verify/timings.json``, what a first Dask run orders its tasks by (:func:`write_timings`)."""
    import subprocess
    import tempfile

    out = {"seeds": seeds}
    spec = ["--seed", "0"] if seeds == 1 else ["--seeds", f"0-{seeds - 1}"]
    for label, extra in (("serial", []), ("workers_2", ["--workers", "2"])):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "verify", "all", *spec, "--quiet", "--report",
                                   f"{tmp}/r", *extra], capture_output=True, text=True)
            out[label] = time.perf_counter() - t0
            out[f"{label}_summary"] = (proc.stdout.strip().splitlines() or [""])[-1]
            if write_timings and label == "serial":
                out["timings_written"] = write_timings_from(Path(tmp) / "r" / "results.json")
    out["ratio"] = out["workers_2"] / out["serial"]
    return out


def write_timings_from(results_json: Path) -> str:
    """Write ``verify/timings.json`` (atomically) from a quick-profile report's ``results.json``: each
    check's seconds at seed 0, rounded to 0.1 s. Returns the path written."""
    data = json.loads(Path(results_json).read_text())
    if data["metadata"].get("profile") != "quick":
        raise ValueError(f"results_json: expected a quick-profile report, got {data['metadata'].get('profile')!r}")
    from verify.registry import all_checks

    # the toolkit's own topics (verify/checks/<topic>/), not a plug-in's
    own = {c.id for c in all_checks() if (ROOT / "verify" / "checks" / c.id.split(".")[0]).is_dir()}
    seconds = {r["id"]: round(float(r["seconds"]), 1) for r in data["results"]
               if r.get("seed", 0) == 0 and r["id"] in own}
    target = ROOT / "verify" / "timings.json"
    doc = {"about": "seconds of each check in a serial quick-profile run (seed 0) on a 2-core machine, written "
                    "by benchmarks/bench.py --write-timings: the order of a first Dask run (longest first)",
           "seconds": dict(sorted(seconds.items()))}
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, target)
    return str(target.relative_to(ROOT))


#: The grid of :func:`bench_grid`: eq. 10's sigma(t) of the merged model at this many times t.
GRID_POINTS = 10_000


def bench_grid() -> dict:
    """``linear_attention.merged.sigma`` at :data:`GRID_POINTS` times: one call with an array of t
    against a Python loop of one call per t (same values)."""
    import theory

    cf = theory.get("linear_attention.merged.sigma")
    at = dict(tau=1.0, D=4, N=31, w_init=1e-3)
    t = np.linspace(0.0, 20.0, GRID_POINTS)
    cf(t=t, **at)  # derive and emit first
    t0 = time.perf_counter()
    grid = cf(t=t, **at)
    t_grid = time.perf_counter() - t0
    t0 = time.perf_counter()
    loop = np.array([cf(t=float(x), **at) for x in t])
    t_loop = time.perf_counter() - t0
    assert np.allclose(grid, loop, rtol=1e-13, atol=0)
    return {"points": GRID_POINTS, "grid": t_grid, "loop": t_loop}


#: Covariances of :func:`bench_stack`.
STACK_SIZE = 1000


def bench_stack() -> dict:
    """``linear_attention.separate.saddle_loss`` (eq. 19, m = 2, N = 31) for :data:`STACK_SIZE` random
    4 x 4 covariances: one call on the stack (S, 4, 4) against a loop of one call per covariance."""
    import theory

    cf = theory.get("linear_attention.separate.saddle_loss")
    rng = np.random.default_rng(0)
    A = rng.normal(size=(STACK_SIZE, 4, 4))
    covs = A @ np.swapaxes(A, 1, 2) / 4 + 0.1 * np.eye(4)
    cf(Lambda=covs[:3], N=31, m=2)  # derive and emit first
    t0 = time.perf_counter()
    stack = cf(Lambda=covs, N=31, m=2)
    t_stack = time.perf_counter() - t0
    t0 = time.perf_counter()
    loop = np.array([cf(Lambda=c, N=31, m=2) for c in covs])
    t_loop = time.perf_counter() - t0
    assert np.allclose(stack, loop, rtol=1e-12, atol=0)
    return {"covariances": STACK_SIZE, "stack_per_second": STACK_SIZE / t_stack,
            "loop_per_second": STACK_SIZE / t_loop}


def bench_cold_eval() -> dict:
    """A fresh ``python -m theory eval`` with the derivation cache warm, and with it off."""
    import subprocess

    cmd = [sys.executable, "-m", "theory", "eval", "linear_attention.merged.sigma", "--json",
           '{"t": 3.0, "tau": 1.0, "D": 4, "N": 31, "w_init": 0.01}']
    out = {}
    subprocess.run(cmd, capture_output=True)  # warm the cache
    for label, env in (("cache_warm", {}), ("cache_off", {"ATTENTION_THEORY_CACHE": "off"})):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run(cmd, capture_output=True, env={**os.environ, **env}, check=True)
            times.append(time.perf_counter() - t0)
        out[label] = min(times)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/bench.py", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--repeat", type=int, default=3, help="fresh interpreters for the import time")
    parser.add_argument("--skip-torch", action="store_true", help="do not time torch training")
    parser.add_argument("--skip-fig4", action="store_true",
                        help="skip the Fig.-4 exact-flow vs torch comparison")
    parser.add_argument("--fig4-ranks", type=_parse_ranks, nargs="?", default=(1,),
                        const=FIG4_ALL_RANKS, metavar="R[,R...]",
                        help="ranks for the Fig.-4 comparison (default 1; the flag alone: 1,2,4,8)")
    parser.add_argument("--fig4-steps", type=int, default=200,
                        help="timed torch steps per rank for the Fig.-4 comparison")
    parser.add_argument("--fig4-batch", type=int, default=FIG4["batch"],
                        help="torch batch for the Fig.-4 comparison (default: the full profile's)")
    parser.add_argument("--fig4-seed", type=int, default=0, help="seed of the Fig.-4 draw")
    parser.add_argument("--device", default="cpu", help="torch device for the Fig.-4 comparison")
    parser.add_argument("--skip-gdpp", action="store_true",
                        help="skip the GD++ full-profile step timing")
    parser.add_argument("--gdpp-steps", type=int, default=10,
                        help="timed GD++ steps per variant (batch 20000)")
    parser.add_argument("--quick-profile", action="store_true",
                        help="time python -m verify all serially and on --workers 2 (minutes)")
    parser.add_argument("--seeds", type=int, default=1, help="with --quick-profile: seeds 0..N-1")
    parser.add_argument("--only-quick-profile", action="store_true",
                        help="time the quick profile (as --quick-profile) and nothing else")
    parser.add_argument("--write-timings", action="store_true",
                        help="with a quick-profile timing: write the serial run's seconds per check to "
                             "verify/timings.json (the order of a first Dask run)")
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="BLAS threads for the numpy timings (default 1: algorithmic scaling, "
                             "not the thread pool's behaviour on a shared machine)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat: must be >= 1")
    if args.blas_threads < 1:
        parser.error("--blas-threads: must be >= 1")
    if args.fig4_steps < 1 or args.fig4_batch < 1:
        parser.error("--fig4-steps, --fig4-batch: must be >= 1")
    if args.gdpp_steps < 1:
        parser.error("--gdpp-steps: must be >= 1")
    if "numpy" in sys.modules:
        print("warning: numpy already imported; --blas-threads has no effect", file=sys.stderr)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.blas_threads)
    global np
    import numpy
    np = numpy

    if args.only_quick_profile:
        qp = bench_quick_profile(args.seeds, args.write_timings)
        if args.json:
            print(json.dumps({"blas_threads": args.blas_threads, "quick_profile": qp}, indent=2))
        else:
            for name, value in _quick_profile_rows(qp):
                print(f"{name}  {value}")
        return 0
    res = {
        "blas_threads": args.blas_threads,
        "import_theory": bench_import(args.repeat),
        "records": bench_records(repeat_cached=200),
        "flow_rhs": bench_rhs(),
        "flow_rhs_separate": bench_rhs_separate(),
        "monte_carlo_zz": bench_mc(),
        "torch_steps_per_second": None if args.skip_torch else bench_torch(),
        "fig4": None if args.skip_fig4 else bench_fig4(
            args.fig4_ranks, seed=args.fig4_seed, steps=args.fig4_steps, batch=args.fig4_batch,
            torch_too=not args.skip_torch, device=args.device),
        "gdpp": None if args.skip_torch or args.skip_gdpp else bench_gdpp(args.gdpp_steps),
        "cold_eval": bench_cold_eval(),
        "grid": bench_grid(),
        "stack": bench_stack(),
        "quick_profile": (bench_quick_profile(args.seeds, args.write_timings)
                          if args.quick_profile or args.write_timings else None),
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
    f4 = res["fig4"]
    if f4 is not None:
        head = f"Fig. 4 (D={f4['D']}, N={f4['N']}, H={f4['H']}, w_init={f4['w_init']:g})"
        for R, r in f4["per_rank"].items():
            if not np.isfinite(r["t_last"]):
                rows.append((f"{head}, R={R}: exact flow", "last drop not reached"))
                continue
            name = f"{head}, R={R}: exact flow to last drop t/tau={r['t_last']:.4g} (LSODA, rtol 1e-10)"
            value = f"{r['flow_seconds']:.3g} s ({r['flow_nfev']} rhs calls, {r['flow_drops']} drops)"
            rows.append((name, value))
            if "torch_steps_per_second" not in r:
                continue
            name = (f"{head}, R={R}: torch online SGD steps/s (batch {f4['batch']}, {f4['device']}, "
                    f"{f4['torch_steps_timed']} steps)")
            rows.append((name, f"{r['torch_steps_per_second']:.1f}"))
            name = (f"{head}, R={R}: torch projected to the same t/tau "
                    f"({r['torch_steps_needed']} steps, eta={f4['eta']:g})")
            rows.append((name, _duration(r["torch_projected_seconds"])))
            rows.append((f"{head}, R={R}: speed ratio torch / exact flow",
                         f"{r['ratio_torch_over_flow']:.3g}x"))
    gp = res["gdpp"]
    if gp is not None:
        head = (f"GD++ step (d={GDPP['d']}, n={GDPP['n']}, L={GDPP['L']}, batch {GDPP['batch']}, "
                f"{GDPP['dtype']}, {gp['threads']} thread(s))")
        rows.append((f"{head}: sampling", f"{gp['sample'] * 1e3:.1f} ms"))
        for name in ("full token forward", "Gram recursion", "Gram recursion, torch.compile"):
            rows.append((f"{head}: loss + gradient, {name}", f"{gp[name] * 1e3:.1f} ms"))
        rows.append((f"{head}: compile time", f"{gp['compile seconds']:.1f} s"))
    ce = res["cold_eval"]
    rows.append(("cold python -m theory eval (merged.sigma), derivation cache warm / off",
                 f"{ce['cache_warm']:.2f} s / {ce['cache_off']:.2f} s"))
    gr = res["grid"]
    rows.append((f"merged.sigma at {gr['points']} times t: one call on the array / a loop of calls",
                 f"{gr['grid'] * 1e3:.2f} ms / {gr['loop'] * 1e3:.0f} ms"))
    st = res["stack"]
    rows.append((f"separate.saddle_loss over {st['covariances']} covariances: one call on the stack / a loop",
                 f"{st['stack_per_second']:.3g} / {st['loop_per_second']:.3g} per s"))
    if res["quick_profile"] is not None:
        rows += _quick_profile_rows(res["quick_profile"])
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0 if fr["exponent_ok"] and fs_["exponent_ok"] else 1


def _quick_profile_rows(qp: dict) -> list[tuple[str, str]]:
    head = f"python -m verify all, quick profile, {qp['seeds']} seed(s)"
    rows = [(f"{head}: serial", f"{qp['serial']:.1f} s ({qp['serial_summary']})"),
            (f"{head}: --workers 2", f"{qp['workers_2']:.1f} s ({qp['workers_2_summary']})"),
            (f"{head}: --workers 2 / serial", f"{qp['ratio']:.3f}")]
    if "timings_written" in qp:
        rows.append(("per-check seconds written to", qp["timings_written"]))
    return rows


if __name__ == "__main__":
    sys.exit(main())
