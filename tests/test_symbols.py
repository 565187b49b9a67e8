"""Symbol tables per topic: one letter may mean different things in two papers, a parameter's kind
must agree with its symbol, and the core holds no paper-specific names."""

import ast
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import theory
from theory import ClosedForm, Param, Symbols, positive
from theory.registry import _REGISTRY, register
from verify.symbolic import sample_params

ROOT = Path(__file__).resolve().parents[1]


def test_one_letter_two_meanings():
    """M is the merged key-query matrix in Zhang et al. 2025 and the vocabulary size in Tian et al.
    2023; each record's emitted function takes the symbol of its own topic."""
    la, ss = theory.symbols_of("linear_attention"), theory.symbols_of("scan_snap")
    assert isinstance(la("M"), sp.MatrixSymbol) and la("M").shape[1] == la("D")
    assert ss("M").is_integer and ss("M").is_positive and not isinstance(ss("M"), sp.MatrixSymbol)
    # s: an integer step count in one paper, a positive real singular value in the plug-in
    assert ss("s").is_integer
    assert theory.symbols_of("saxe_linear")("s").is_integer is None


def test_every_record_uses_its_topics_symbols():
    for cf in theory.records():
        table = cf.symbols
        assert table is theory.symbols_of(cf.topic)
        free = {s.name for s in cf.numeric_expr.free_symbols if hasattr(s, "name")}
        args = {a.name for a in cf._args()}
        assert free <= args | {"D"}, (cf.id, free - args)


def test_citation_is_derived_from_the_topic_paper():
    cf = theory.get("linear_attention.data.lambda_hat_sq")
    assert cf.source == "eqs. 15, 30, 31"
    assert cf.citation == "Zhang, Singh, Latham, Saxe 2025, eqs. 15, 30, 31"
    for r in theory.records():
        cite = theory.paper_of(r.id).cite
        assert not r.source.startswith(cite), r.id  # the place only; the paper is the topic's
        assert r.citation.startswith(cite + ", "), r.id


@pytest.mark.parametrize("kind, group, ok", [
    ("index", "integers", True), ("index", "positive", True), ("index", "matrices", False),
    ("positive", "integers", False), ("positive", "reals", True), ("real", "positive", False),
    ("nonnegative", "positive", False), ("nonnegative", "nonnegative", True),
    ("covariance", "matrices", True), ("covariance", "positive", False), ("vector", "vectors", True),
])
def test_kind_must_agree_with_symbol(kind, group, ok):
    table = Symbols(**({} if group == "positive" else {group: ("x",)}))
    p = Param("x", kind, "x")
    if ok:
        table.check_param(p)
    else:
        with pytest.raises(ValueError, match=r"^x: a "):
            table.check_param(p)


def test_an_index_from_zero_needs_a_symbol_that_allows_zero():
    p = Param("m", "index", "m", low=0)
    with pytest.raises(ValueError, match="^m: "):
        Symbols(integers=("m",)).check_param(p)
    Symbols(naturals=("m",)).check_param(p)
    assert Symbols(naturals=("m",))("m").is_nonnegative and Symbols(naturals=("m",))("m").is_integer


def test_registration_refuses_a_parameter_its_topic_types_otherwise():
    """A topic that forgot to declare a matrix fails loudly at registration, naming the parameter."""
    from theory.params import covariance

    cf = ClosedForm(id="linear_attention.test.bad", title="x", source="eq. 0", status="exact",
                    params=(covariance("tau", "a matrix where the topic has a scalar"),),
                    derive=lambda: sp.Integer(1))
    with pytest.raises(ValueError, match="^tau: a covariance parameter of linear_attention.test.bad"):
        register(cf)
    assert "linear_attention.test.bad" not in _REGISTRY


@pytest.mark.parametrize("groups", [{"matrices": ("A",), "integers": ("A",)}, {"reals": "xy"},
                                    {"integers": ("D",)}, {"reals": ("not a name",)}])
def test_bad_tables_are_refused(groups):
    with pytest.raises(ValueError):
        Symbols(**groups)


@pytest.mark.parametrize("sample", [(1, 0), (0, 1, "log"), (1, 2, "lin"), ("a", 2), (1, "D"), [0, 1]])
def test_bad_sample_ranges_are_refused(sample):
    with pytest.raises(ValueError, match="^sample: "):
        Param("x", "positive", "x", sample=sample)


def test_random_points_follow_the_declared_ranges():
    """The high-precision check draws each parameter from its own declared range."""
    rng = np.random.default_rng(3)
    h = theory.get("scan_snap.h.time_of")
    draws = [sample_params(h, rng)["h"] for _ in range(200)]
    assert 1e-4 <= min(draws) and max(draws) <= 0.04
    cf = theory.get("linear_attention.separate.saddle_loss")  # m: a direction count 1..3
    assert {sample_params(cf, rng)["m"] for _ in range(200)} <= {1, 2, 3}
    p = positive("x", "x", sample=(5, 6))
    fake = ClosedForm(id="nowhere.part.x", title="x", source="eq. 1", status="exact", params=(p,),
                      derive=lambda: Symbols()("x"))
    assert all(5 <= sample_params(fake, rng)["x"] <= 6 for _ in range(50))


def _string_literals(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def test_the_core_holds_no_parameter_names():
    """Adding a paper edits no core file: no parameter name of any record is spelled in the symbol
    machinery, the comparison, the registry or the random sampler."""
    names = {p.name for cf in theory.records() for p in cf.params} | {
        n for cf in theory.records() for n in cf.derived_names}
    names -= {"D"}  # the matrix size, generic
    for rel in ("theory/symbols.py", "theory/compare.py", "theory/registry.py", "theory/params.py",
                "verify/symbolic.py"):
        found = _string_literals(ROOT / rel) & names
        assert not found, (rel, sorted(found))


def test_names_typeset_as_their_topic_declares():
    """A trailing digit is not a subscript where a topic says so (tr W^2, not trW_2), and a power of
    a declared name stays readable."""
    import theory

    assert theory.get("localization.eigen.variance").latex() == (
        r"d \operatorname{tr}(W^{2}) - (\operatorname{tr} W)^{2}")
    assert r"w_{\mathrm{init}}" in theory.get("linear_attention.merged.sigma").latex()
    for cf in theory.records():
        for form in ("derived", "printed"):
            if form == "printed" and cf.printed is None:
                continue
            text = cf.latex(form)
            assert "trW_{2}" not in text and "trLambda" not in text and "w_{init}" not in text, (cf.id, text)


def test_latex_table_is_validated():
    from theory.symbols import Symbols

    with pytest.raises(ValueError, match="^latex: expected names mapped to LaTeX text"):
        Symbols(latex={"x": ""})
    with pytest.raises(ValueError, match="^form: expected one of"):
        __import__("theory").get("localization.eigen.variance").latex("typo")
