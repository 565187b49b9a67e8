"""Running check tasks: in this process, on a local Dask cluster, or on an existing one.

A :class:`Task` is one (check, seed, profile, device, settings). :func:`execute` runs a list of
them and hands each result, as it arrives, to the results store (:mod:`verify.results`) and to a
callback (the progress bar):

* serially in this process (the default: a small run needs no cluster);
* ``workers=N``: a ``dask.distributed.LocalCluster`` of N worker processes with one thread each
  (BLAS and torch threads set to ``threads`` per worker, so that workers do not oversubscribe the
  cores), forked from one server that has imported the checks and their libraries
  (:mod:`verify.worker_imports`) where the platform has one;
* ``scheduler="tcp://host:8786"``: an existing cluster, started by hand (``dask scheduler``,
  ``dask worker ADDRESS``) or by dask-jobqueue on a batch system.

Each task is one Dask task, except that checks sharing a computation through a cache of their
process (:attr:`verify.registry.Check.shares`) run as one Dask task per seed, profile, device and
settings (:func:`units`), so that it is computed once; a task whose worker dies is retried (``retries``). With
``device="cuda"`` a torch check asks for a worker that declares a ``GPU`` resource
(``dask worker ADDRESS --resources GPU=1``). A check's result depends only on its id, settings,
seed and profile, so the same task gives the same result whichever way it runs.

``resume=True`` takes a task's result from the store when one with the same key (check, settings,
seed, profile, device, toolkit commit) is there, and runs only the rest.
"""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from .registry import CheckResult

__all__ = ["Task", "execute", "run_task", "run_tasks", "units", "skipped_result", "Interrupted", "expected_seconds",
           "task_priority"]

#: Environment variables that cap BLAS / OpenMP threads in a worker process.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class Task:
    """One run: check ``check_id`` at ``seed`` in ``profile`` on ``device``, with ``settings``."""

    check_id: str
    seed: int
    profile: str = "quick"
    device: str = "cpu"
    settings: dict = field(default_factory=dict)

    def key(self, commit_id: str | None = None):
        from .results import Key

        return Key.of(self.check_id, seed=self.seed, profile=self.profile, device=self.device,
                      settings=self.settings, commit_id=commit_id)

    @property
    def name(self) -> str:
        """A unique, readable Dask key."""
        from .results import canonical

        return f"{self.check_id}|seed={self.seed}|{self.profile}|{self.device}|{canonical(self.settings)}"


class Interrupted(Exception):
    """Ctrl-C during :func:`execute`; ``results`` holds the runs that finished (in task order)."""

    def __init__(self, results: list):
        super().__init__("interrupted")
        self.results = results


def skipped_result(chk, reason: str, *, profile: str, seed: int) -> CheckResult:
    """A record for a check that cannot run here (``details["skipped"]`` holds why)."""
    return CheckResult(
        id=chk.id, title=chk.title, covers=list(chk.covers), method=chk.method,
        profile=profile, seed=seed, passed=False, measured=None, predicted=None,
        discrepancy=float("nan"), tolerance=float("nan"), criterion=f"skipped: {reason}",
        controls=[], details={"skipped": reason}, seconds=0.0)


def run_task(task: Task, threads: int | None = None, progress=None, draw: bool = False) -> CheckResult:
    """Run one task here (in this process or in a Dask worker). ``threads``: cap torch's CPU
    threads (BLAS threads are capped by the worker's environment). ``draw``: draw the run's
    figures too (:func:`verify.report.draw_ahead`), so that a worker, not the report, draws them."""
    from .registry import get_check, run_check

    if threads is not None:
        try:
            import torch

            torch.set_num_threads(int(threads))
        except ImportError:
            pass
    chk = get_check(task.check_id)
    reason = chk.available()
    if reason:
        return skipped_result(chk, reason, profile=task.profile, seed=task.seed)
    res = run_check(chk, profile=task.profile, seed=task.seed, device=task.device, progress=progress,
                    settings=task.settings)
    if draw:
        from .report import draw_ahead

        draw_ahead(res)
    return res


def run_tasks(tasks: list[Task], threads: int | None = None, draw: bool = False) -> list[CheckResult]:
    """Run several tasks one after another in this process (:func:`run_task`): checks that share a
    computation (:attr:`verify.registry.Check.shares`) then compute it once."""
    return [run_task(task, threads, None, draw) for task in tasks]


def units(indexed: list[tuple[int, Task]]) -> list[list[tuple[int, Task]]]:
    """The Dask tasks for ``indexed`` tasks: one per task, except that tasks whose checks share a
    computation (:attr:`verify.registry.Check.shares`) at the same seed, profile, device and settings
    form one unit (in their order), which runs in one process. Units come in the order of their first
    task."""
    from .registry import get_check
    from .results import canonical

    out: list[list[tuple[int, Task]]] = []
    shared: dict[tuple, list[tuple[int, Task]]] = {}
    for i, task in indexed:
        name = get_check(task.check_id).shares
        if name is None:
            out.append([(i, task)])
            continue
        key = (name, task.seed, task.profile, task.device, canonical(task.settings))
        if key not in shared:
            shared[key] = []
            out.append(shared[key])
        shared[key].append((i, task))
    return out


def execute(tasks: list[Task], *, workers: int | None = None, scheduler: str | None = None,
            store=None, resume: bool = False, on_result: Callable[[CheckResult], None] | None = None,
            progress=None, retries: int = 2, threads: int | None = None,
            draw: bool | Callable[[Task], bool] = False) -> list[CheckResult]:
    """Run ``tasks`` and return their results in task order (see the module docstring).

    ``store``: a :class:`verify.results.Store` that every result is written to as it arrives;
    with ``resume``, stored results are reused. ``on_result(result)`` is called once per task as it
    finishes (stored ones first). ``progress``: what a serially run check gets as
    ``ctx.progress``. ``draw``: draw each run's figures as it finishes (for a report;
    :func:`verify.report.draw_ahead`): on its Dask worker, or, run serially, in one helper process
    beside the next check; a function of the task draws only the runs it is true for. Ctrl-C raises
    :class:`Interrupted` carrying what finished."""
    if workers is not None and scheduler is not None:
        raise ValueError("--workers: cannot be combined with --scheduler (give one of them)")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"--workers: expected an integer >= 1, got {workers!r}")
    wants = draw if callable(draw) else (lambda task, flag=bool(draw): flag)
    results: list[CheckResult | None] = [None] * len(tasks)
    pending = []
    for i, task in enumerate(tasks):
        stored = store.get(task.key()) if (store is not None and resume) else None
        if stored is not None:
            results[i] = stored
            if on_result:
                on_result(stored)
        else:
            pending.append(i)

    def finished(i: int, res: CheckResult) -> None:
        results[i] = res
        if store is not None:
            store.put(tasks[i].key(), res)
        if on_result:
            on_result(res)

    try:
        if workers is None and scheduler is None:
            _serially([(i, tasks[i]) for i in pending], finished, threads=threads, progress=progress,
                      draw=wants)
        else:
            _on_dask([(i, tasks[i]) for i in pending], finished, workers=workers, scheduler=scheduler,
                     retries=retries, threads=threads, draw=wants,
                     estimates=store.mean_seconds() if store is not None else None)
    except KeyboardInterrupt:
        raise Interrupted([r for r in results if r is not None]) from None
    return results  # type: ignore[return-value]


def _serially(indexed: list[tuple[int, Task]], finished, *, threads, progress,
              draw: Callable[[Task], bool]) -> None:
    """Run the tasks one after another in this process; a finished run's figures, where ``draw``
    is true for its task, are drawn by one helper process while the next check runs (the last ones
    are waited for)."""
    drawer = _FigureDrawer() if any(draw(task) for _, task in indexed) else None
    try:
        for i, task in indexed:
            res = run_task(task, threads, progress)
            finished(i, res)
            if drawer is not None and draw(task):
                drawer.submit(res)
    except BaseException:
        if drawer is not None:  # Ctrl-C: what is not drawn yet is drawn by the report, or not at all
            drawer.close(cancel=True)
        raise
    if drawer is not None:
        drawer.close()


class _FigureDrawer:
    """Draws the figures of finished runs in one spawned helper process, so that a serial run draws
    them on another core while its next check runs (a thread would share the interpreter lock with
    the checks), and sets ``result.drawn`` (:func:`verify.report.draw_ahead`). Started at the first
    run with figures; a failure to start or to draw leaves the drawing to the report."""

    def __init__(self):
        self._pool = None
        self._pending: list = []

    def submit(self, res) -> None:
        from .report import _have_matplotlib, draw_specs

        if not res.figures or not _have_matplotlib():
            return
        try:
            if self._pool is None:
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_quiet_drawer)
            self._pending.append((res, self._pool.submit(draw_specs, res.figures)))
        except (OSError, RuntimeError):  # cannot start a process here: the report draws
            return

    def close(self, cancel: bool = False) -> None:
        if self._pool is None:
            return
        if cancel:
            self._pool.shutdown(wait=False, cancel_futures=True)
            return
        for res, fut in self._pending:
            try:
                res.drawn = fut.result()
            except Exception:  # the helper died: the report draws these
                pass
        self._pool.shutdown()


def _quiet_drawer() -> None:
    """The drawing process: one thread for BLAS, ignore Ctrl-C (the parent handles it)."""
    import signal

    for v in THREAD_VARS:
        os.environ[v] = "1"
    signal.signal(signal.SIGINT, signal.SIG_IGN)


#: Seconds a check of each method takes in the quick profile, roughly, for a check neither the store
#: nor :data:`TIMINGS` knows: the order in which Dask starts tasks (longest first).
_GUESS = {"torch": 10.0, "monte_carlo": 3.0, "exact_flow": 2.0, "high_precision": 2.0, "symbolic": 1.0}

#: The seconds each check took in a serial run of the quick profile (seed 0, a 2-core machine), shipped
#: with the package and written by ``benchmarks/bench.py --write-timings``: what a first run on Dask,
#: with nothing in its store yet, orders its tasks by.
TIMINGS = "timings.json"


@functools.cache
def expected_seconds() -> dict[str, float]:
    """check id -> seconds, from :data:`TIMINGS` (empty if the file is missing or unreadable; read
    once: do not modify the mapping)."""
    import json
    from importlib import resources

    try:
        data = json.loads(resources.files(__package__).joinpath(TIMINGS).read_text())
        return {str(k): float(v) for k, v in data["seconds"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def task_priority(check_id: str, method: str, estimates: dict[str, float]) -> int:
    """Dask priority of a task (higher starts first): its expected tenths of a second, from the
    store's ``estimates`` (this machine's past runs), else :data:`TIMINGS`, else the method's guess.
    Starting the longest first keeps a long task from running alone at the end."""
    seconds = estimates.get(check_id)
    if seconds is None:
        seconds = expected_seconds().get(check_id, _GUESS.get(method, 1.0))
    return int(round(10.0 * seconds))


#: The thread environment of the fork server that starts this process's local workers (None: none started).
_FORKSERVER_ENV: dict | None = None


def _forkserver_config(env: dict) -> dict:
    """Dask settings that start a local cluster's workers from one fork server which has imported
    :mod:`verify.worker_imports` (the libraries and every check), so that the workers do not each import
    them (on two cores a one-seed ``--workers 2`` run of the quick profile took about 6 % less time). The
    fork server is started with the workers' thread ``env`` (BLAS reads it once, at import), so it
    serves only clusters with that environment: ``{}`` (Dask's default, fresh interpreters) for any
    other, and where the platform has no fork server."""
    import multiprocessing

    global _FORKSERVER_ENV
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return {}
    if _FORKSERVER_ENV is not None and _FORKSERVER_ENV != env:
        return {}
    config = {"distributed.worker.multiprocessing-method": "forkserver",
              **{f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in env.items()}}
    if _FORKSERVER_ENV is None:
        import dask
        from distributed.utils import get_mp_context

        with dask.config.set(config):
            get_mp_context()  # Dask's own preload list first, then ours in its place
        multiprocessing.get_context("forkserver").set_forkserver_preload(["distributed", "verify.worker_imports"])
        _FORKSERVER_ENV = dict(env)
    return config


def _local_cluster(workers: int, threads: int | None):
    """``(cluster, threads)``: a ``LocalCluster`` of ``workers`` single-threaded worker processes, each with
    ``threads`` torch/BLAS threads (default: the cores shared out), forked from one fork server
    (:func:`_forkserver_config`), with the settings below; the client's environment is left as it was."""
    import dask
    from dask.distributed import LocalCluster

    env = _worker_env(workers, threads)
    # Dask's nanny sets MALLOC_TRIM_THRESHOLD_ in its workers, which turns off glibc's dynamic mmap
    # threshold: every allocation over 128 KiB is then mapped and unmapped afresh, and a torch training
    # step (a few MB of temporaries) ran 2-3x slower (torch_theorem3_sparse: 10.8 s -> 32 s). The
    # worker's statistical profiler (a stack sample every 10 ms) is turned off as well, and the periodic
    # health checks run less often: the event-loop tick (20 ms), the system monitor (0.5 s) and the memory
    # monitor (0.1 s; the nannies run theirs in this process). Idle, they took about 2 % of a core in each
    # worker and 3 % in the client (0.2 and 0.3 CPU-s per 10 s; 0.02 and 0.06 with these settings).
    config = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
              "distributed.worker.profile.enabled": False,
              "distributed.admin.tick.interval": "1s",
              "distributed.admin.system-monitor.interval": "5s",
              "distributed.worker.memory.monitor-interval": "1s"}
    with _environ_restored(env), dask.config.set({**config, **_forkserver_config(env)}):
        # (the nanny sets the pre-spawn environment in this process: the client's own is put back)
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=":0", env=env)
    return cluster, int(env[THREAD_VARS[0]])


def _worker_env(workers: int, threads: int | None) -> dict:
    """The thread environment of each of ``workers`` local workers: ``threads`` torch/BLAS threads, by
    default the cores shared out."""
    per_worker = threads or max(1, (os.cpu_count() or 1) // workers)
    return {v: str(per_worker) for v in THREAD_VARS}


@contextmanager
def _environ_restored(names):
    """Put back this process's environment variables ``names`` as they were, whatever the block sets."""
    saved = {v: os.environ.get(v) for v in names}
    try:
        yield
    finally:
        for v, value in saved.items():
            if value is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = value


def start_fork_server(workers: int, threads: int | None = None) -> None:
    """Start now the fork server from which a local cluster of ``workers`` workers (``threads`` each) will be
    forked (:func:`_forkserver_config`), so that its imports (several seconds) run beside this process's
    own work before the cluster starts (the command line calls it as soon as it has read ``--workers``).
    Nothing where the platform has no fork server, or one with another thread environment has started, or
    without dask.distributed (running the checks then says what is missing)."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        return
    env = _worker_env(workers, threads)
    if not _forkserver_config(env):
        return
    from multiprocessing import forkserver

    with _environ_restored(env):
        os.environ.update(env)  # the server and the workers it forks read their thread counts from it
        forkserver.ensure_running()


def _on_dask(indexed: list[tuple[int, Task]], finished, *, workers, scheduler, retries, threads,
             estimates: dict | None = None, draw: Callable[[Task], bool] = lambda task: False) -> None:
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise ValueError("--workers/--scheduler need dask.distributed: "
                         "pip install 'attention-dynamics-theory[cluster]'") from None
    estimates = estimates or {}
    cluster = None
    if scheduler is None:
        cluster, threads = _local_cluster(workers, threads)
        client = Client(cluster)
    else:
        import dask

        try:  # Dask's connect timeout (30 s unless configured)
            client = Client(scheduler, timeout=dask.config.get("distributed.comm.timeouts.connect"))
        except OSError as exc:
            raise ValueError(f"--scheduler: cannot reach {scheduler!r} ({exc})") from None
    try:
        from .registry import get_check

        futures = {}
        planned = []
        for unit in units(indexed):
            methods = [get_check(task.check_id).method for _, task in unit]
            gpu = any(task.device == "cuda" and m == "torch" for (_, task), m in zip(unit, methods))
            priority = sum(task_priority(task.check_id, m, estimates) for (_, task), m in zip(unit, methods))
            planned.append((priority, gpu, unit))
        # the longest tasks first (a long task started last leaves the other workers idle); submitted in that
        # order too, since a worker starts the first tasks that reach the scheduler before the rest arrive
        planned.sort(key=lambda p: -p[0])
        for priority, gpu, unit in planned:
            options = dict(pure=False, retries=retries, resources={"GPU": 1} if gpu else None, priority=priority)
            drawn = draw(unit[0][1])  # a unit's tasks share seed, settings and profile
            if len(unit) == 1:
                fut = client.submit(run_task, unit[0][1], threads, None, drawn, key=unit[0][1].name, **options)
            else:
                fut = client.submit(run_tasks, [task for _, task in unit], threads, drawn,
                                    key=f"{unit[0][1].name}|and {len(unit) - 1} sharing it", **options)
            futures[fut] = unit
        for fut in as_completed(futures):
            unit = futures.pop(fut)  # the last reference but this one: the worker then drops the result
            try:
                out = fut.result()
                out = [out] if len(unit) == 1 else out
            except Exception as exc:  # the task's worker died more often than retries allow
                out = [_lost(task, exc) for _, task in unit]
            for (i, _), res in zip(unit, out):
                finished(i, res)
    except KeyboardInterrupt:
        client.cancel(list(futures) if "futures" in locals() else [])
        raise
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _lost(task: Task, exc: Exception) -> CheckResult:
    """A failed result for a task no worker could finish."""
    from .registry import get_check

    chk = get_check(task.check_id)
    return CheckResult(
        id=chk.id, title=chk.title, covers=list(chk.covers), method=chk.method, profile=task.profile,
        seed=task.seed, passed=False, measured=None, predicted=None, discrepancy=float("nan"),
        tolerance=float("nan"), criterion="the task was lost (its worker died on every try)", controls=[],
        details={}, seconds=0.0, error=f"{type(exc).__name__}: {exc}")
