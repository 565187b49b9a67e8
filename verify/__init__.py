"""Evidence for the closed forms of :mod:`theory`: Monte Carlo, exact gradient flows and
torch training, each a registered check that can fail.

``python -m verify list | all | ID...`` runs them and writes a report
(``results.json``, ``report.md``, figures). ``verify`` imports ``theory``, never the
reverse.

Layout
------
check.py    Check, Outcome, Control, the registry of checks, run_check
stats.py    means with standard errors, z-scores, family-wise thresholds
tasks/      samplers of the papers' data (in-context regression, ...)
flows/      exact expected-loss gradient flows (numpy/scipy)
models/     torch modules: real attention layers
checks/     one module per topic, registering its checks
report.py   results.json, report.md, figures
cli.py      the command line
"""

from .check import Check, CheckResult, Context, Control, Outcome, check, checks, get_check, run_check

__all__ = ["Check", "CheckResult", "Context", "Control", "Outcome", "check", "checks", "get_check",
           "run_check"]
