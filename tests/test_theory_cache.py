"""The cache on disk of emitted functions (``theory.cache``).

* every record's emitted function, in every backend and form, stored and loaded again gives
  bit-identical output at the record's example point, and a new process loads them all
  without importing sympy or deriving;
* a missing, corrupt or stale entry is a miss (recomputed, rewritten); a changed key misses;
* several processes writing one entry at once leave a valid entry;
* ``ATTENTION_THEORY_CACHE=off`` writes nothing, ``=FOLDER`` relocates;
* ``python -m theory cache info | clear``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mpmath
import numpy as np
import pytest

import theory
from theory import cache
from theory.cli import example_values, main
from theory.emit import emit

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("numpy", "mpmath", "torch")
SIGMA = "linear_attention.merged.sigma"
SIGMA_AT = {"t": 3.0, "tau": 1.0, "D": 4, "N": 31, "w_init": 0.01}


def fresh(cf_id: str):
    """A copy of the registered record with nothing derived or emitted in this process."""
    return dataclasses.replace(theory.get(cf_id), _fns={})


def forms(cf):
    """``(form, expression getter)`` of the record's emitted functions."""
    out = [("stable" if cf.stable is not None else "derived", lambda: cf.numeric_expr)]
    if cf.printed is not None:
        out.append(("printed", lambda: cf.printed_expr))
    return out


def bits(x):
    """An exact, comparable image of a numeric result (numpy, mpmath or torch; nested)."""
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().numpy()
    if isinstance(x, mpmath.matrix):
        return ("mpmatrix", x.rows, x.cols, tuple(bits(x[i, j]) for i in range(x.rows) for j in range(x.cols)))
    if isinstance(x, mpmath.mpf):
        return ("mpf", x._mpf_)
    if isinstance(x, mpmath.mpc):
        return ("mpc", x._mpc_)
    if isinstance(x, (list, tuple)):
        return tuple(bits(v) for v in x)
    if isinstance(x, (bool, int)):
        return ("int", int(x))
    if isinstance(x, float):
        return ("float", x.hex())
    arr = np.asarray(x)
    return ("array", str(arr.dtype), arr.shape, arr.tobytes())


def env_with(**extra):
    env = {k: v for k, v in os.environ.items() if k != cache.ENV}
    env.update(extra)
    return env


@pytest.fixture
def folder(tmp_path, monkeypatch):
    where = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV, str(where))
    return where


# -- every record, every backend --------------------------------------------------------
@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A cache folder holding every emitted function, and those functions as emitted."""
    where = tmp_path_factory.mktemp("warm")
    emitted = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(cache.ENV, str(where))
        for cf in theory.records():
            for form, expr in forms(cf):
                for backend in BACKENDS:
                    try:
                        fn = emit(expr(), cf._args(), backend)
                    except Exception:
                        # only a record that evaluates itself may lack an emitted function
                        assert cf.evaluate is not None and form != "printed", (cf.id, backend, form)
                        continue
                    assert cache.store(cf, backend, form, fn) is not None, (cf.id, backend, form)
                    emitted.append((cf, backend, form, fn))
    return where, emitted


def test_every_entry_loads_bit_identical(warm, monkeypatch):
    where, emitted = warm
    monkeypatch.setenv(cache.ENV, str(where))
    assert {cf.id for cf, *_ in emitted} >= {cf.id for cf in theory.records() if cf.evaluate is None}
    compared = 0
    for cf, backend, form, fn in emitted:
        loaded = cache.load(cf, backend, form)
        assert loaded is not None, (cf.id, backend, form)
        with mpmath.workdps(30):
            values, dims = cf.validate(example_values(cf))
            args = cf.arguments(values, dims, backend)
            try:
                want = bits(fn(*args))
            except Exception as exc:  # the emitted function fails there: so must the loaded one
                with pytest.raises(type(exc)):
                    loaded(*args)
                continue
            got = bits(loaded(*args))
        assert got == want, (cf.id, backend, form)
        compared += 1
    assert compared >= 0.9 * len(emitted)


def test_a_new_process_loads_every_entry_without_sympy(warm):
    where, emitted = warm
    wanted = sorted({(cf.id, backend, form) for cf, backend, form, _ in emitted})
    code = textwrap.dedent("""
        import json, sys
        import theory
        from theory import cache
        for cf_id, backend, form in json.loads(sys.argv[1]):
            cf = theory.get(cf_id)
            fn = cf.printed_function(backend) if form == "printed" else cf.function(backend)
            assert callable(fn), (cf_id, backend, form)
        derived = [cf.id for cf in theory.records() if {"expr", "printed_expr", "numeric_expr"} & set(vars(cf))]
        print(json.dumps({"sympy": "sympy" in sys.modules, "derived": derived}))
    """)
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(wanted)], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=env_with(**{cache.ENV: str(where)}))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out == {"sympy": False, "derived": []}


# -- misses -----------------------------------------------------------------------------
def test_a_miss_derives_stores_and_the_next_process_loads(folder):
    cf = fresh(SIGMA)
    value = cf(**SIGMA_AT)
    assert "numeric_expr" in vars(cf)  # derived on the miss
    entries = sorted(folder.glob("*.fn.json"))
    assert [p.name.split(".")[-5:-3] for p in entries] == [["numpy", "stable" if cf.stable else "derived"]]
    again = fresh(SIGMA)
    assert again(**SIGMA_AT) == value
    assert not {"expr", "numeric_expr"} & set(vars(again))  # loaded, not derived


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "wrong key", "bad global", "bad source"])
def test_a_corrupt_entry_is_recomputed(folder, damage):
    cf = fresh(SIGMA)
    value = cf(**SIGMA_AT)
    (path,) = folder.glob("*.fn.json")
    text = path.read_text()
    entry = json.loads(text)
    if damage == "garbage":
        path.write_bytes(b"\x00\xffnot json")
    elif damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "empty":
        path.write_text("")
    elif damage == "wrong key":
        path.write_text(json.dumps({**entry, "key": "0" * 24}))
    elif damage == "bad global":
        path.write_text(json.dumps({**entry, "globals": {**entry["globals"], "numpy": ["module", "no_such_module"]}}))
    else:
        path.write_text(json.dumps({**entry, "source": "def broken(:\n"}))
    again = fresh(SIGMA)
    assert again(**SIGMA_AT) == value
    assert "numeric_expr" in vars(again)  # recomputed
    assert json.loads(path.read_text()) == entry  # and rewritten


def test_a_changed_key_misses(folder, monkeypatch):
    cf = fresh(SIGMA)
    form = "stable" if cf.stable is not None else "derived"
    fn = cf.function("numpy")
    assert cache.load(cf, "numpy", form) is not None
    assert cache.key(cf, "numpy", form, version="0.0.0-other") != cache.key(cf, "numpy", form)
    monkeypatch.setattr(cache, "toolkit_version", lambda: "0.0.0-other")
    assert cache.load(cf, "numpy", form) is None
    assert cache.store(cf, "numpy", form, fn) is not None
    assert cache.load(cf, "numpy", form) is not None
    assert len(list(folder.glob("*.fn.json"))) == 2  # one entry per key


def test_the_key_follows_the_record_source_and_emit(folder, monkeypatch):
    cf = fresh(SIGMA)
    form = "stable" if cf.stable is not None else "derived"
    before = cache.key(cf, "numpy", form)
    assert before == cache.key(cf, "numpy", form)
    assert cache.key(cf, "mpmath", form) != before and cache.key(cf, "numpy", "printed") != before
    package = cf.derive.__module__.rpartition(".")[0]
    monkeypatch.setattr(cache, "_package_hash", lambda p: "edited" if p == package else "same")
    assert cache.key(cf, "numpy", form) != before
    monkeypatch.undo()
    monkeypatch.setenv(cache.ENV, str(folder))
    monkeypatch.setattr(cache, "_core_hash", lambda: "emit.py edited")
    assert cache.key(cf, "numpy", form) != before


def test_concurrent_writers_leave_a_valid_entry(folder, tmp_path):
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        import theory
        from theory import cache
        from theory.emit import emit
        cf = theory.get({SIGMA!r})
        form = "stable" if cf.stable is not None else "derived"
        fn = emit(cf.numeric_expr, cf._args(), "numpy")
        Path(sys.argv[1], sys.argv[2]).touch()  # ready; start when both are
        while len(list(Path(sys.argv[1]).iterdir())) < 2:
            time.sleep(0.001)
        for _ in range(300):
            assert cache.store(cf, "numpy", form, fn) is not None
            assert cache.load(cf, "numpy", form) is not None  # never a partial entry
    """)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = env_with(**{cache.ENV: str(folder)})
    procs = [subprocess.Popen([sys.executable, "-c", code, str(barrier), str(i)], cwd=REPO, env=env,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    names = sorted(p.name for p in folder.iterdir())
    # one function entry and the expression it was emitted from; no temporary file left
    assert sorted(n.rsplit(".", 2)[-2] for n in names) == ["expr", "fn"], names
    cf = fresh(SIGMA)
    assert cf(**SIGMA_AT) == pytest.approx(0.7787146544808913, rel=1e-14)
    assert "numeric_expr" not in vars(cf)  # the entry loaded


# -- switches ---------------------------------------------------------------------------
@pytest.mark.parametrize("off", ["off", "OFF", "0"])
def test_a_disabled_cache_writes_nothing(tmp_path, monkeypatch, off):
    monkeypatch.setenv(cache.ENV, off)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert not cache.enabled() and cache.folder() is None
    cf = fresh(SIGMA)
    assert cf(**SIGMA_AT) == pytest.approx(0.7787146544808913, rel=1e-14)
    form = "stable" if cf.stable is not None else "derived"
    assert cache.store(cf, "numpy", form, cf.function("numpy")) is None
    assert cache.load(cf, "numpy", form) is None
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_the_folder_is_relocated_or_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path / "elsewhere"))
    assert cache.folder() == tmp_path / "elsewhere"
    monkeypatch.delenv(cache.ENV)
    import platformdirs

    assert cache.folder() == Path(platformdirs.user_cache_dir("attention-dynamics-theory"))


def test_a_record_that_evaluates_itself_does_not_derive(folder):
    cf = fresh("scan_snap.speed.gamma")
    assert cf.evaluate is not None
    cf(**example_values(cf))
    assert not {"expr", "numeric_expr", "printed_expr"} & set(vars(cf))
    assert list(folder.glob("*")) == []


# -- command line -----------------------------------------------------------------------
def test_cache_info_and_clear(folder, capsys):
    fresh(SIGMA)(**SIGMA_AT)
    (folder / "unrelated.json").write_text("{}")  # not an entry: left alone
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    # the emitted function and the expression it came from
    assert f"folder:   {folder}" in out and "enabled:  yes" in out and "entries:  2" in out
    size = sum(p.stat().st_size for p in [*folder.glob("*.fn.json"), *folder.glob("*.expr.pickle")])
    assert f"size:     {size} bytes" in out
    assert main(["cache", "clear"]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert [p.name for p in folder.iterdir()] == ["unrelated.json"]
    assert main(["cache", "info"]) == 0
    assert "entries:  0" in capsys.readouterr().out


def test_cache_info_when_off(monkeypatch, capsys):
    monkeypatch.setenv(cache.ENV, "off")
    assert main(["cache", "info"]) == 0
    assert f"enabled:  no ({cache.ENV}=off)" in capsys.readouterr().out


def test_expressions_are_kept_and_a_new_process_does_not_derive(folder):
    cf = fresh(SIGMA)
    derived = cf.expr
    assert [p.name.split(".")[-4] for p in folder.glob("*.expr.pickle")] == ["derived"]
    original = cf.derive

    @functools.wraps(original)  # the same source, hence the same key
    def refuse():
        raise AssertionError("derived again")

    assert dataclasses.replace(theory.get(SIGMA), _fns={}, derive=refuse).expr == derived
    for p in folder.glob("*.expr.pickle"):
        p.write_bytes(b"not a pickle")  # a corrupt entry is a miss: derived and written again
    assert fresh(SIGMA).expr == derived
    assert dataclasses.replace(theory.get(SIGMA), _fns={}, derive=refuse).expr == derived


def test_a_derivation_outside_the_records_is_kept(folder, monkeypatch):
    import sympy as sp

    calls = []

    def build():
        calls.append(1)
        return (sp.Symbol("n") + 1) / 2

    name, package = "linear_attention.test.example", "theory.linear_attention"
    first = cache.derivation(name, package, build)
    assert cache.derivation(name, package, build) == first == (sp.Symbol("n") + 1) / 2
    assert len(calls) == 1  # the second call loaded the entry
    (entry,) = folder.glob(f"{name}.sympy.derived.*.expr.pickle")
    entry.write_bytes(b"not a pickle")  # a corrupt entry is a miss: built and written again
    assert cache.derivation(name, package, build) == first and len(calls) == 2
    assert cache.derivation(name, package, build) == first and len(calls) == 2
    assert cache.info()["entries"] == 1
    with pytest.raises(ValueError, match="name"):
        cache.derivation("a/b", package, build)
    monkeypatch.setenv(cache.ENV, "off")  # off: built every time, nothing written
    assert cache.derivation(name, package, build) == first and len(calls) == 3


def test_a_derivation_keyed_by_several_packages(folder, monkeypatch):
    calls = []

    def build():
        calls.append(1)
        return True

    name = "linear_attention.test.verdict"
    assert cache.derivation(name, ["theory.linear_attention", "theory.compare"], build) is True
    assert cache.derivation(name, ("theory.compare", "theory.linear_attention"), build) is True
    assert len(calls) == 1  # the same packages in another order: the same entry
    assert cache.derivation(name, "theory.linear_attention", build) is True
    assert len(calls) == 2  # fewer packages: another key
    for bad in ([], [""], [3]):
        with pytest.raises(ValueError, match="package"):
            cache.derivation(name, bad, build)


def test_a_proof_of_equal_forms_is_kept_and_redone_when_the_comparison_changes(folder, monkeypatch):
    from theory import compare

    cf = fresh("linear_attention.data.lambda_hat_sq")
    assert cf.printed is not None and not cf.erratum
    calls = []
    real = compare.equal

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(compare, "equal", counted)
    monkeypatch.setattr(cache, "_package_hash", lambda p: "source")
    assert cf.forms_equal("derived", "printed") is True and len(calls) == 1
    assert fresh(cf.id).forms_equal("derived", "printed") is True and len(calls) == 1  # loaded
    assert fresh(cf.id).forms_equal("printed", "derived") is True and len(calls) == 2  # another entry
    monkeypatch.setattr(cache, "_package_hash", lambda p: "edited" if p == "theory.compare" else "source")
    assert fresh(cf.id).forms_equal("derived", "printed") is True and len(calls) == 3  # compare.py edited
    assert fresh(cf.id).forms_equal("derived", "printed") is True and len(calls) == 3
    with pytest.raises(ValueError, match="first: expected one of"):
        cf.forms_equal("exact", "printed")
    with pytest.raises(ValueError, match="has no printed form"):
        fresh("linear_attention.merged.gradient").forms_equal("derived", "printed")
