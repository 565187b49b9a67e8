"""A paper is a plug-in unit: topics and check modules are discovered, never listed, and an
installed package adds a paper through two entry-point groups.

The example plug-in ``examples/saxe_linear_network`` (Saxe, McClelland, Ganguli 2014) is installed
by ``make install``; these tests load it through the real entry-point code path and fail, saying
how to install it, when it is missing. Broken plug-ins are simulated with throwaway distributions
(a ``*.dist-info`` folder with ``entry_points.txt`` on ``sys.path``) in a subprocess.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import theory
from theory.papers import CHECKS_GROUP, PAPERS, TOPICS_GROUP, Paper, paper_of
from verify.registry import all_checks, get_check, run_check

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "saxe_linear_network"
INSTALL = (f"{sys.executable} -m pip install --constraint constraints.txt --no-deps --editable "
           "examples/saxe_linear_network (or `make install`)")
SAXE_RECORDS = {"saxe_linear.modes.strength", "saxe_linear.modes.learning_time"}
SAXE_CHECKS = {"saxe_linear.modes.flow_matrix", "saxe_linear.modes.torch_gradient_descent",
               "saxe_linear.symbolic_printed_forms", "saxe_linear.high_precision"}
CORE = ("linear_attention", "localization", "preconditioned_gd", "scan_snap")


def _installed(group: str) -> None:
    names = {ep.name for ep in entry_points(group=group)}
    assert "saxe_linear" in names, (f"the example plug-in is not installed (no entry point 'saxe_linear' in "
                                    f"group {group}); install it: {INSTALL}")


def _run(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=300, **kw)


# -- the example plug-in, through its real entry points ----------------------------------------------
def test_example_plugin_is_installed():
    _installed(TOPICS_GROUP)
    _installed(CHECKS_GROUP)


def test_example_records_are_listed_by_the_command_line():
    _installed(TOPICS_GROUP)
    out = _run("-m", "theory", "list")
    assert out.returncode == 0, out.stderr
    assert SAXE_RECORDS <= {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_example_checks_are_listed_by_the_command_line():
    _installed(CHECKS_GROUP)
    out = _run("-m", "verify", "list")
    assert out.returncode == 0, out.stderr
    assert SAXE_CHECKS <= {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_example_paper_is_discovered():
    _installed(TOPICS_GROUP)
    paper = PAPERS["saxe_linear"]
    assert paper.cite == "Saxe, McClelland, Ganguli 2014" and paper.arxiv == "1312.6120"
    assert paper.topic == "saxe_linear" and paper.link == "https://arxiv.org/abs/1312.6120"
    assert paper_of("saxe_linear.modes.strength") is paper
    assert SAXE_RECORDS <= set(theory.ids())


def test_example_derivations_equal_the_printed_forms():
    _installed(TOPICS_GROUP)

    for id in SAXE_RECORDS:
        cf = theory.get(id)
        assert cf.equal(cf.expr, cf.printed_expr) is True, id
    cf = theory.get("saxe_linear.modes.strength")
    assert cf.equal(cf.expr, cf.numeric_expr) is True
    # u(t) -> s, u(0) = u0, and the learning time inverts the trajectory
    assert cf(s=2.0, u0=0.01, t=1e6, tau=1.0) == pytest.approx(2.0, rel=1e-15)
    assert cf(s=2.0, u0=0.01, t=0.0, tau=1.0) == pytest.approx(0.01, rel=1e-15)
    t = theory.get("saxe_linear.modes.learning_time")(s=2.0, u0=0.01, u_f=1.3, tau=0.7)
    assert cf(s=2.0, u0=0.01, t=t, tau=0.7) == pytest.approx(1.3, rel=1e-12)
    with pytest.raises(ValueError, match="^u_f: "):
        theory.get("saxe_linear.modes.learning_time")(s=2.0, u0=0.01, u_f=2.5, tau=1.0)


@pytest.mark.parametrize("check_id", sorted(SAXE_CHECKS))
def test_example_checks_pass(check_id):
    _installed(CHECKS_GROUP)
    chk = get_check(check_id)
    if chk.available():
        pytest.skip(chk.available())
    res = run_check(chk, seed=0)
    assert res.error is None, res.error
    assert res.passed and all(c["rejected"] for c in res.controls), (res.discrepancy, res.tolerance, res.controls)


# -- discovery of the built-in topics and checks -------------------------------------------------------
def test_core_topics_are_discovered_from_their_packages():
    assert set(CORE) <= set(PAPERS)
    for topic in CORE:
        paper = PAPERS[topic]
        assert isinstance(paper, Paper) and paper.topic == topic
        assert paper == importlib.import_module(f"theory.{topic}").PAPER  # declared once, in the __init__
    assert PAPERS["linear_attention"].cite == "Zhang, Singh, Latham, Saxe 2025"
    assert str(PAPERS["scan_snap"]) == PAPERS["scan_snap"].cite
    assert {i.split(".", 1)[0] for i in theory.ids()} <= set(PAPERS)


def test_import_theory_stays_cheap_and_discovery_is_lazy():
    out = _run("-c", "import sys, theory, verify; from theory.papers import PAPERS; "
                     "assert 'sympy' not in sys.modules; list(PAPERS); assert 'sympy' not in sys.modules; "
                     "assert not theory.registry._LOADED; print('ok')")
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_every_check_module_is_imported_recursively(tmp_path):
    from theory.registry import import_package

    pkg = tmp_path / "plugpkg_nested"
    (pkg / "sub" / "deeper").mkdir(parents=True)
    for folder in (pkg, pkg / "sub", pkg / "sub" / "deeper"):
        (folder / "__init__.py").write_text("")
    (pkg / "b.py").write_text("")
    (pkg / "a.py").write_text("")
    (pkg / "sub" / "c.py").write_text("")
    (pkg / "sub" / "deeper" / "d.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    try:
        names = import_package("plugpkg_nested")
    finally:
        sys.path.remove(str(tmp_path))
    assert names == ["plugpkg_nested", "plugpkg_nested.a", "plugpkg_nested.b", "plugpkg_nested.sub",
                     "plugpkg_nested.sub.c", "plugpkg_nested.sub.deeper", "plugpkg_nested.sub.deeper.d"]
    assert all(c.id.split(".", 1)[0] in PAPERS for c in all_checks())


# -- broken plug-ins are named -------------------------------------------------------------------------
def _fake_plugin(tmp_path: Path, name: str, modules: dict[str, str], groups: dict[str, dict[str, str]]) -> Path:
    """A throwaway distribution ``name`` in ``tmp_path``: its modules and an entry_points.txt."""
    for rel, text in modules.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    info = tmp_path / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    eps = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) + "\n"
                  for group, entries in groups.items())
    (info / "entry_points.txt").write_text(eps)
    return tmp_path


PAPER_DECL = 'from theory import Paper\nPAPER = Paper(authors=["Doe"], year=2020, title="T", venue="V")\n'


def _in_subprocess(path: Path, code: str) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(ROOT)])}
    return _run("-c", code, env=env)


def test_a_broken_topic_plugin_is_named(tmp_path):
    path = _fake_plugin(tmp_path, "broken-topic", {
        "broken_topic/__init__.py": PAPER_DECL,
        "broken_topic/part.py": "raise RuntimeError('boom in part')\n",
    }, {TOPICS_GROUP: {"broken": "broken_topic"}})
    out = _in_subprocess(path, "import theory; theory.ids()")
    assert out.returncode != 0
    assert "PluginError: plug-in 'broken' = 'broken_topic' (entry point group attention_dynamics_theory.topics, " \
           "distribution broken-topic) failed to load: RuntimeError: boom in part" in out.stderr


def test_a_topic_plugin_without_a_paper_is_named(tmp_path):
    path = _fake_plugin(tmp_path, "no-paper", {"no_paper/__init__.py": ""}, {TOPICS_GROUP: {"nopaper": "no_paper"}})
    out = _in_subprocess(path, "from theory.papers import PAPERS; list(PAPERS)")
    assert out.returncode != 0 and "plug-in 'nopaper'" in out.stderr and "must define PAPER" in out.stderr


def test_a_plugin_registering_outside_its_topic_is_named(tmp_path):
    path = _fake_plugin(tmp_path, "stray", {
        "stray_topic/__init__.py": PAPER_DECL,
        "stray_topic/part.py": """
            from theory import ClosedForm, Symbols, positive, register
            sym = Symbols()
            register(ClosedForm(id="other.part.x", title="x", source="eq. 1", status="exact",
                                params=(positive("x", "x"),), derive=lambda: sym("x")))
        """,
    }, {TOPICS_GROUP: {"stray": "stray_topic"}})
    out = _in_subprocess(path, "import theory; theory.ids()")
    assert out.returncode != 0 and "plug-in 'stray'" in out.stderr and "other.part.x" in out.stderr


def test_a_topic_plugin_cannot_take_a_core_topic(tmp_path):
    path = _fake_plugin(tmp_path, "clash", {"clash_topic/__init__.py": PAPER_DECL},
                        {TOPICS_GROUP: {"scan_snap": "clash_topic"}})
    out = _in_subprocess(path, "from theory.papers import PAPERS; list(PAPERS)")
    assert out.returncode != 0 and "topic 'scan_snap' is already built-in topic" in out.stderr


def test_a_broken_checks_plugin_is_named(tmp_path):
    path = _fake_plugin(tmp_path, "broken-checks", {"broken_checks/__init__.py": "import no_such_module_here\n"},
                        {CHECKS_GROUP: {"bad": "broken_checks"}})
    out = _in_subprocess(path, "from verify.registry import all_checks; all_checks()")
    assert out.returncode != 0
    assert "plug-in 'bad' = 'broken_checks' (entry point group attention_dynamics_theory.checks" in out.stderr
    assert "No module named 'no_such_module_here'" in out.stderr


def test_a_working_fake_plugin_adds_a_topic_and_a_check(tmp_path):
    path = _fake_plugin(tmp_path, "good", {
        "good_topic/__init__.py": PAPER_DECL,
        "good_topic/part.py": """
            from theory import ClosedForm, Symbols, positive, register
            sym = Symbols()
            register(ClosedForm(id="good.part.double", title="2x", source="eq. 1", status="exact",
                                params=(positive("x", "x"),), derive=lambda: 2 * sym("x")))
        """,
        "good_checks/__init__.py": """
            import theory
            from verify import Outcome, check
            @check("good.part.value", covers=["good.part.double"], method="exact_flow", title="value")
            def value(ctx):
                v = theory.get("good.part.double")(x=1.5)
                return Outcome(v, 3.0, abs(v - 3.0), 1e-12, "exact")
        """,
    }, {TOPICS_GROUP: {"good": "good_topic"}, CHECKS_GROUP: {"good": "good_checks"}})
    out = _in_subprocess(path, "from verify.registry import get_check, run_check; from theory.papers import PAPERS; "
                               "r = run_check(get_check('good.part.value')); "
                               "print(r.passed, PAPERS['good'].cite)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "Doe", "2020"]
