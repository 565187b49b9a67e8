"""Fuzzing ``python -m theory eval`` with malformed parameters, for every registered closed form.

Each example starts from a parameter object that is valid parameter by parameter and breaks it
in one way: one parameter replaced by a value its kind cannot take (wrong type, empty or ragged
or nested list, boolean, null, JSON object, NaN or infinity, a huge integer, a negative size, a
non-integral index ...), one parameter left out, an unknown parameter added, or the whole
``--json`` text not an object or not JSON at all. ``theory.cli.main`` runs in-process and must
exit with status 2 and print exactly one line ``error: <name>: ...`` on stderr, where ``<name>`` is
the parameter that was broken (or ``--json``), with no traceback, in well under a second.

Derandomized, so the same examples run on every machine.
"""

import contextlib
import io
import json
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import theory
from theory.cli import main
from theory.params import INDEX_MAX

IDS = theory.ids()

#: Examples per closed form: 129 forms x 30 examples run in about 15 s on 2 busy cores.
EXAMPLES_PER_ID = 30
#: CPU seconds one call may take (validation fails before any expression is derived). CPU time of
#: this process, not wall time: on a loaded machine a fast call can wait seconds for a core.
CALL_LIMIT_S = 1.0


# -- values no parameter of a given kind accepts --------------------------------------------------
_scalar_junk = st.one_of(
    st.none(), st.booleans(), st.text(max_size=6), st.sampled_from(["NaN", "Infinity", "1", "1e3"]),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 10**400, -(10**400)]),
)
_not_numbers = st.one_of(st.none(), st.booleans(), st.text(max_size=3), st.just({"a": 1}))
# a list with at least one entry that is not a number (numpy would take True as 1.0, None as NaN)
_poisoned_list = st.tuples(st.lists(st.floats(0.1, 10.0), max_size=2), _not_numbers).map(
    lambda t: [*t[0], t[1]])
_empty_or_ragged = st.sampled_from([[], [[]], [[], []], [[[]]], [[1.0, 2.0], [3.0]], [1.0, [2.0]],
                                    [[1.0], [2.0, 3.0]]])
_common = st.one_of(_scalar_junk, _poisoned_list, _empty_or_ragged)

_non_integral = st.floats(0.01, 1e6).filter(lambda x: x != math.floor(x))


def bad_value(p):
    """Strategy of values the parameter ``p`` must refuse, naming itself."""
    kind = p.kind
    if kind == "positive":
        return st.one_of(_common, st.floats(max_value=0.0, allow_nan=False), st.integers(max_value=0))
    if kind == "nonnegative":
        return st.one_of(_common, st.floats(max_value=-1e-300, allow_nan=False), st.integers(max_value=-1))
    if kind == "real":
        return _common
    if kind == "index":
        high = p.high if p.high is not None else INDEX_MAX
        return st.one_of(
            _common, st.integers(max_value=p.low - 1), st.integers(min_value=high + 1),
            st.sampled_from([2**64, 10**30, 1e30, 1e300, high + 1.0 if high < 2**53 else 2.0**60]),
            _non_integral, st.lists(st.integers(1, 3), min_size=1, max_size=2),
        )
    if kind == "covariance":
        return st.one_of(
            _common, st.floats(0.1, 2.0),                                     # a scalar
            st.lists(st.floats(max_value=0.0, allow_nan=False), min_size=1, max_size=3),
            st.sampled_from([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],               # not square
                             [[1.0, 0.5], [0.0, 1.0]],                          # not symmetric
                             [[1.0, 2.0], [2.0, 1.0]],                          # indefinite
                             [[[1.0]]]]),                                       # 3-D
        )
    if kind == "matrix":
        return st.one_of(_common, st.floats(-2.0, 2.0), st.sampled_from(
            [[1.0, 2.0, 3.0], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[[1.0]]],
             [[1.0, 0.0], [0.0, 1.0]]]))                                       # D = 2, not 3
    if kind == "vector":
        return st.one_of(_common, st.floats(-2.0, 2.0), st.sampled_from(
            [[[1.0, 2.0], [3.0, 4.0]], [0.1, 0.2], [[[0.1]]]]))
    if kind == "subset":
        return st.one_of(
            st.none(), st.booleans(), st.text(min_size=1, max_size=3), st.just({"1": 0}),
            st.integers(), st.sampled_from([[0], [-1], [1, 1], [1.5], [2**64], ["1"], [True], [[1]],
                                            [None], [4], [10**400]]))
    if kind == "steps":
        return st.one_of(
            _scalar_junk, _poisoned_list, st.sampled_from([[], [[]], [[0.5]], [[0.5], [0.5]]]),
            st.floats(0.1, 1.0), st.lists(st.floats(0.1, 1.0), min_size=p.high + 1, max_size=p.high + 2))
    raise AssertionError(kind)


_key = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789",
               min_size=1, max_size=6)


@st.composite
def broken_call(draw, cf):
    """``(json_text, name)``: a broken parameter object and the name its error must lead with."""
    params = {p.name: p.example() for p in cf.params}
    how = draw(st.sampled_from(["value", "value", "value", "missing", "unknown", "not an object",
                                "not JSON"]))
    if how == "value":
        p = draw(st.sampled_from(cf.params))
        params[p.name] = draw(bad_value(p))
        return json.dumps(params), p.name
    if how == "missing":
        name = draw(st.sampled_from(cf.param_names))
        del params[name]
        return json.dumps(params), name
    if how == "unknown":
        name = draw(_key.filter(lambda k: k not in cf.param_names))
        params[name] = draw(st.one_of(st.floats(0.1, 1.0), _scalar_junk))
        return json.dumps(params), name
    if how == "not an object":
        return json.dumps(draw(st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False),
                                         st.text(max_size=5), st.lists(st.integers(), max_size=3)))), "--json"
    text = draw(st.sampled_from(["", "{", "{'t': 1}", '{"a": }', "[1,", "nan", "{,}", "{\"a\" 1}"]))
    return text, "--json"


def run_main(argv):
    out, err = io.StringIO(), io.StringIO()
    start = time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue(), time.process_time() - start


@pytest.mark.parametrize("cf_id", IDS)
def test_malformed_parameters_give_one_named_error_line(cf_id):
    cf = theory.get(cf_id)

    @settings(max_examples=EXAMPLES_PER_ID, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(case=broken_call(cf))
    def check(case):
        text, name = case
        rc, out, err, seconds = run_main(["eval", cf_id, "--json", text])
        lines = err.splitlines()
        assert rc == 2, (text, rc, out, err)
        assert "Traceback" not in err, err
        assert len(lines) == 1, (text, err)
        assert lines[0].startswith(f"error: {name}: "), (text, lines[0])
        assert out == ""
        assert seconds < CALL_LIMIT_S, (text, seconds)

    check()
