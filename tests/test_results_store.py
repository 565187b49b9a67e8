"""The results store (verify.results) and where checks run (verify.execute): serially, on a local
Dask cluster, and on a scheduler and workers started as separate processes on 127.0.0.1."""

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verify import execute as ex
from verify.execute import Task, execute
from verify.registry import CheckResult
from verify.results import SCHEMA_VERSION, Key, Store, load

#: Fast, deterministic checks (a closed-form identity, limits, a seeded Monte Carlo).
FAST = ("scan_snap.h.identities", "localization.rho.lemma2_limits", "preconditioned_gd.wishart.mc_trace_moments")


def _result(id="a.b.c", seed=0, discrepancy=0.5, passed=True) -> CheckResult:
    return CheckResult(id=id, title="t", covers=["a.b.x"], method="exact_flow", profile="quick", seed=seed,
                       passed=passed, measured=[1.0, float("nan")], predicted=1.0, discrepancy=discrepancy,
                       tolerance=1.0, criterion="c", controls=[], details={"n": 3}, seconds=0.1,
                       figures={"f": {"kind": "lines", "series": []}})


def test_put_get_roundtrip_and_table(tmp_path):
    path = tmp_path / "s" / "store.sqlite"
    with Store(path) as st:
        k0 = Key.of("a.b.c", seed=0, profile="quick", settings={"N": 31, "spectrum": "white"}, commit_id="abc")
        k1 = Key.of("a.b.c", seed=1, profile="quick", settings={"spectrum": "white", "N": 31}, commit_id="abc")
        st.put(k0, _result(seed=0))
        st.put(k1, _result(seed=1, discrepancy=float("nan"), passed=False))
        st.put(k1, _result(seed=1, discrepancy=2.0, passed=False))  # the same key: replaced
        assert len(st) == 2 and st.keys() == {k0, k1}
        assert st.mean_seconds() == {"a.b.c": pytest.approx(0.1)}  # what Dask orders tasks by
        back = st.get(k0)
        assert back.details == {"n": 3} and back.figures == {"f": {"kind": "lines", "series": []}}
        assert back.discrepancy == 0.5 and st.get(Key.of("a.b.c", seed=9, profile="quick")) is None
    df = load(path)
    assert list(df["seed"]) == [0, 1] and list(df["passed"]) == [True, False]
    assert list(df["ratio"]) == [0.5, 2.0] and list(df["setting.N"]) == [31, 31]


def test_tasks_are_ordered_by_the_store_then_the_shipped_timings_then_the_method():
    # the longest first: this machine's past runs (the store) win over the shipped quick-profile
    # timings, which win over the guess by method
    from verify.registry import all_checks

    shipped = ex.expected_seconds()
    ids = {c.id for c in all_checks()}
    assert shipped and set(shipped) <= ids, "stale ids in verify/timings.json: bench.py --write-timings"
    assert all(s >= 0 for s in shipped.values())
    known = max(shipped, key=shipped.get)
    assert ex.task_priority(known, "symbolic", {}) == round(10 * shipped[known])
    assert ex.task_priority(known, "symbolic", {known: 0.04}) == 0
    assert ex.task_priority("not.a.check", "torch", {}) > ex.task_priority("not.a.check", "symbolic", {})


def test_bad_stores_are_refused(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database " * 100)
    with pytest.raises(ValueError, match="^--store: .* is not a results store"):
        Store(junk)
    with pytest.raises(ValueError, match="^--store: .* is not a file"):
        Store(tmp_path)
    with Store(tmp_path / "v.sqlite") as st:
        st._db.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(ValueError, match="schema version"):
        Store(tmp_path / "v.sqlite")
    with pytest.raises(ValueError, match="^path: no results store"):
        load(tmp_path / "missing.sqlite")


_WRITER = """
import sys
from verify.registry import CheckResult
from verify.results import Key, Store
path, first = sys.argv[1], int(sys.argv[2])
with Store(path) as st:
    for i in range(first, first + 40):
        st.put(Key.of("a.b.c", seed=i, profile="quick", commit_id="abc"),
               CheckResult(id="a.b.c", title="t", covers=[], method="exact_flow", profile="quick", seed=i,
                           passed=True, measured=1.0, predicted=1.0, discrepancy=0.5, tolerance=1.0,
                           criterion="c", controls=[], details={}, seconds=0.1))
"""


def test_two_writers_share_one_store(tmp_path):
    """Two processes writing one store at the same time: every row arrives, none is corrupted."""
    path = tmp_path / "shared.sqlite"
    Store(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(first)]) for first in (0, 40)]
    assert [p.wait(120) for p in procs] == [0, 0]
    with Store(path) as st:
        assert len(st) == 80 and {k.seed for k in st.keys()} == set(range(80))


def _summary(results):
    return [(r.id, r.seed, r.passed, r.discrepancy) for r in results]


def test_resume_runs_only_what_is_not_stored(tmp_path, monkeypatch):
    tasks = [Task(i, s) for i in FAST[:2] for s in (0, 1)]
    seen = []
    with Store(tmp_path / "s.sqlite") as st:
        def stop_after_two(res):
            seen.append(res)
            if len(seen) == 2:
                raise KeyboardInterrupt
        with pytest.raises(ex.Interrupted) as info:
            execute(tasks, store=st, on_result=stop_after_two)
        assert len(info.value.results) == 2 and len(st) == 2  # what finished is stored at once
        ran = []
        real = ex.run_task
        monkeypatch.setattr(ex, "run_task", lambda task, *a: ran.append(task) or real(task, *a))
        again = execute(tasks, store=st, resume=True)
    assert ran == tasks[2:]  # only the two that had not finished
    assert _summary(again) == _summary(execute(tasks))


@contextlib.contextmanager
def _dask_processes(tmp_path, n_workers: int, *, env=None, preload=None):
    """A ``dask scheduler`` and ``n_workers`` ``dask worker`` processes on 127.0.0.1; yields the
    scheduler's address. At the end the workers' process groups are killed (a nanny that is
    restarting its worker can ignore SIGTERM)."""
    import json

    dask = str(Path(sys.executable).parent / "dask")
    sched_file = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(sched_file)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env)]
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        extra = ["--preload", str(preload)] if preload else []
        for _ in range(n_workers):
            procs.append(subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--host", "127.0.0.1",
                                           "--no-dashboard", *extra], cwd=Path(__file__).resolve().parents[1],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        yield address
    finally:
        procs[0].terminate()
        for p in procs[1:]:
            os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait(30)


#: Four checks that share one training grid (``shares``), and small settings for it (about 1.5 s).
SHARING = ("scan_snap.attention.torch_fig6_panels", "scan_snap.attention.torch_fig6_threshold",
           "scan_snap.attention.torch_fig11_recall", "scan_snap.attention.torch_fig12_recall")
SMALL_GRID = {"panels": "1", "ratio": "1,2,3"}


def test_checks_sharing_a_computation_form_one_dask_task():
    from verify.registry import get_check

    assert {get_check(i).shares for i in SHARING} == {"scan_snap.attention.syn_medium_grid"}
    tasks = [Task(FAST[0], 0)] + [Task(i, s) for s in (0, 1) for i in SHARING] + [Task(FAST[1], 0)]
    tasks += [Task(SHARING[0], 0, settings=SMALL_GRID), Task(SHARING[1], 0, device="cuda"),
              Task(SHARING[2], 0, profile="full")]
    got = [[i for i, _ in unit] for unit in ex.units(list(enumerate(tasks)))]
    # one unit per seed, in the order of its first task; other settings, devices or profiles apart
    assert got == [[0], [1, 2, 3, 4], [5, 6, 7, 8], [9], [10], [11], [12]]
    assert ex.units([]) == []
    with pytest.raises(ValueError, match="^shares: expected a non-empty name"):
        from verify.registry import check

        check("tmp_topic.shares.bad", covers=[], method="exact_flow", title="t", shares=" ")


def test_serial_local_cluster_and_remote_scheduler_agree(tmp_path):
    """The same tasks give the same results serially, on --workers 2 and on a scheduler with two
    workers started as separate processes on 127.0.0.1; figures drawn on the workers come back.
    Checks that share a computation run as one task there (and give what they give serially)."""
    tasks = [Task(i, s) for i in FAST for s in (0, 3)] + [Task(i, 0, settings=SMALL_GRID) for i in SHARING]
    serial = _summary(execute(tasks))
    assert all(p for _, _, p, _ in serial[:2 * len(FAST)])  # the small grid need not pass
    # a function of the task picks the runs whose figures are drawn (here: regimes at seed 0)
    regimes = [Task("scan_snap.h.regimes", 0), Task("scan_snap.h.regimes", 1)]
    drawn = execute(tasks + regimes, workers=2, draw=lambda task: task.seed == 0)
    assert _summary(drawn[:-2]) == serial
    # the figures of a run are drawn on its worker and come back with it
    assert drawn[-2].figures and set(drawn[-2].drawn) == set(drawn[-2].figures)
    assert all(f[".png"].startswith(b"\x89PNG") for f in drawn[-2].drawn.values())
    assert drawn[-1].figures and not drawn[-1].drawn  # seed 1: not picked
    here = execute(regimes, draw=lambda task: task.seed == 0)  # serially: in a helper process
    assert here[0].drawn.keys() == drawn[-2].drawn.keys() and not here[1].drawn
    assert not any(r.drawn for r in execute(tasks[:1]))  # only when asked
    with _dask_processes(tmp_path, 2) as address:
        assert address.startswith("tcp://127.0.0.1:")
        remote = _summary(execute(tasks, scheduler=address))
    assert remote == serial


def _worker_state():
    import dask
    import torch

    return ("verify.worker_imports" in sys.modules, os.environ.get("OPENBLAS_NUM_THREADS"), torch.get_num_threads(),
            os.getppid(), dask.config.get("distributed.worker.profile.enabled"),
            dask.config.get("distributed.admin.tick.interval"))


def test_local_workers_start_from_one_fork_server_with_their_thread_environment(monkeypatch):
    """A local cluster's workers are forked from one server that has imported the checks and their
    libraries, with the workers' thread environment, started ahead of the cluster as the command line
    does; the workers run without Dask's profiler and with slower health checks; the client's own
    environment is left as it was; a cluster with another thread environment starts fresh interpreters
    instead."""
    import multiprocessing

    from dask.distributed import Client

    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork server on this platform")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "7")
    # the fork server of this process, if an earlier test started one, serves its own environment only
    threads = int((ex._FORKSERVER_ENV or {}).get("OPENBLAS_NUM_THREADS", 1))
    ex.start_fork_server(2, threads)
    assert ex._FORKSERVER_ENV == {v: str(threads) for v in ex.THREAD_VARS}
    assert os.environ["OPENBLAS_NUM_THREADS"] == "7"
    assert ex._forkserver_config({v: f"{threads}0" for v in ex.THREAD_VARS}) == {}   # another one: not served
    cluster, per_worker = ex._local_cluster(2, threads)
    assert per_worker == threads and os.environ["OPENBLAS_NUM_THREADS"] == "7"
    with cluster, Client(cluster) as client:
        states = list(client.run(_worker_state).values())
    assert len(states) == 2 and {s[:3] for s in states} == {(True, str(threads), threads)}
    assert states[0][3] == states[1][3] != os.getpid()      # one parent, the fork server
    assert {s[4:] for s in states} == {(False, "1s")}
    # execute() puts the client's environment back after starting its cluster
    assert _summary(execute([Task(FAST[0], 0)], workers=2)) == _summary(execute([Task(FAST[0], 0)]))
    assert os.environ["OPENBLAS_NUM_THREADS"] == "7"
    from verify.cli import main

    assert main([FAST[0], "--workers", "2", "--report", "", "--quiet"]) == 0   # the command line's early start
    assert os.environ["OPENBLAS_NUM_THREADS"] == "7"


def test_execute_refuses_bad_arguments():
    with pytest.raises(ValueError, match="^--workers: cannot be combined with --scheduler"):
        execute([], workers=2, scheduler="tcp://127.0.0.1:1")
    with pytest.raises(ValueError, match="^--workers: expected an integer >= 1"):
        execute([], workers=0)
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}), \
            pytest.raises(ValueError, match="^--scheduler: cannot reach"):
        execute([Task(FAST[0], 0)], scheduler="tcp://127.0.0.1:9")


def test_cli_store_and_resume(tmp_path, capsys):
    from verify.cli import main

    rep = tmp_path / "rep"
    assert main([FAST[0], "--seeds", "0-1", "--report", str(rep), "--quiet"]) == 0
    assert (rep / "results.sqlite").is_file() and len(load(rep / "results.sqlite")) == 2
    assert main([FAST[0], "--seeds", "0-2", "--report", str(rep), "--quiet", "--resume"]) == 0
    assert len(load(rep / "results.sqlite")) == 3
    assert main(["all", "--report", "", "--resume", "--quiet"]) == 2
    assert "--resume: needs a store" in capsys.readouterr().err
    assert main(["all", "--workers", "0", "--quiet"]) == 2
    assert "--workers: expected an integer >= 1" in capsys.readouterr().err
    assert not math.isnan(load(rep / "results.sqlite")["discrepancy"].iloc[0])


#: A worker preload (``dask worker --preload FILE``): registers two checks that kill their worker
#: process, one only on its first try (it leaves a marker file), one on every try.
_DYING = '''
import os
import time
from pathlib import Path

from verify.cli import registered_checks
from verify.registry import _CHECKS, Outcome, check

MARKER = Path({marker!r})


def dies_once(ctx):
    if not MARKER.exists():
        MARKER.write_text("died")
        time.sleep(2.0)  # a worker that dies while its nanny is still starting takes the nanny down too
        os._exit(1)
    return Outcome(measured=1.0, predicted=1.0, discrepancy=0.0, tolerance=1.0, criterion="ran after a restart")


def dies_always(ctx):
    time.sleep(2.0)
    os._exit(1)


def register():
    registered_checks()
    for id, fn in (("tmp_topic.worker.dies_once", dies_once), ("tmp_topic.worker.dies_always", dies_always)):
        if id not in _CHECKS:
            check(id, covers=[], method="exact_flow", title=id)(fn)


register()
'''


@pytest.mark.timeout(180)
def test_a_task_whose_worker_dies_is_retried(tmp_path):
    """The worker running a task dies (``os._exit``); its nanny starts a new one and the task runs
    again there. A task that kills every worker it lands on comes back as a lost result."""
    import importlib.util

    from verify import registry

    marker = tmp_path / "died-once"
    preload = tmp_path / "dying_checks.py"
    preload.write_text(_DYING.format(marker=str(marker)))
    spec = importlib.util.spec_from_file_location("dying_checks", preload)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # the same checks here
    # a task may kill 2 workers before the scheduler gives up on it (Dask's default: 4)
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
    try:
        with _dask_processes(tmp_path, 1, env=env, preload=preload) as address:
            # one after the other: a task queued on a worker that another task kills counts that death too
            once, = execute([Task("tmp_topic.worker.dies_once", 0)], scheduler=address)
            always, = execute([Task("tmp_topic.worker.dies_always", 0)], scheduler=address)
    finally:
        for id in ("tmp_topic.worker.dies_once", "tmp_topic.worker.dies_always"):
            registry._CHECKS.pop(id, None)
    assert marker.read_text() == "died"  # the first try killed its worker
    assert once.passed and once.error is None and once.criterion == "ran after a restart"
    assert not always.passed and "lost" in always.criterion and always.error
