"""Symbolic and high-precision checks of every closed form of Bao et al. 2024.

* ``localization.symbolic_printed_forms``: each derived expression equals the paper's printed
  one (sympy), each stable rewrite equals its derivation, and every erratum differs.
* ``localization.high_precision``: numpy agrees with mpmath at 50 digits at random
  parameters; a 1e-6 nudge of trW2 is rejected by the same tolerance.
"""

from __future__ import annotations

from ...symbolic import register_topic_checks

symbolic_printed_forms, high_precision = register_topic_checks(
    "localization", control_id="localization.u.variance", control_param="trW2")
