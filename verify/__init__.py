"""Evidence for the closed forms of :mod:`theory`: Monte Carlo, exact gradient flows and
torch training, each a registered check that can fail.

``python -m verify list | all | ID...`` runs them and writes a report
(``results.json``, ``report.md``, figures). ``verify`` imports ``theory``, never the
reverse.

Layout
------
registry.py Check, Outcome, Control, the registry of checks, run_check
outcomes.py builders of the common outcomes: Monte Carlo z-test, exact identity, their controls
stats.py    means with standard errors, z-scores, family-wise thresholds
jsonable.py strict JSON of what checks return (results.json)
tasks/      samplers of the papers' data (in-context regression, ...)
flows/      exact expected-loss gradient flows (numpy/scipy)
models/     torch modules: real attention layers
checks/     one module per topic, registering its checks
report.py   results.json, report.md, figures
cli.py      the command line

Extension API
-------------
:func:`check` registers a check function ``f(ctx: Context) -> Outcome``; an :class:`Outcome` carries
its :class:`Control` negative controls (:func:`z_test` and :func:`exact_identity` build the common
kinds, :func:`z_control` and :func:`exact_control` their controls); :func:`register_topic_checks` registers a topic's
symbolic and high-precision checks. Check modules are discovered: the modules under
``verify/checks/`` (recursively), then every installed package named in the entry-point group
``attention_dynamics_theory.checks`` (see ``docs/adding-a-paper.md``).
"""

__all__ = ["Check", "CheckResult", "Context", "Control", "Outcome", "check", "all_checks", "get_check",
           "run_check", "register_topic_checks", "z_test", "z_control", "exact_identity", "exact_control",
           "to_jsonable"]

#: The module each public name lives in (imported on first use).
_HOME = {"register_topic_checks": "symbolic", "z_test": "outcomes", "z_control": "outcomes",
         "exact_identity": "outcomes", "exact_control": "outcomes", "to_jsonable": "jsonable"}


def __getattr__(name: str):
    # the public names are loaded on first use, so that ``python -m verify`` starts at once
    if name in __all__:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_HOME.get(name, 'registry')}"), name)
    raise AttributeError(f"module 'verify' has no attribute {name!r}")
