"""Symbolic and high-precision checks of every closed form of Ahn et al. 2023.

* ``preconditioned_gd.symbolic_printed_forms``: each derived expression equals the paper's
  printed one (sympy), each stable rewrite equals its derivation, and errata differ.
* ``preconditioned_gd.high_precision``: numpy agrees with mpmath at 50 digits at random
  parameters; a 1e-6 nudge of Sigma is rejected by the same tolerance.
"""

from __future__ import annotations

from ...symbolic import register_topic_checks

symbolic_printed_forms, high_precision = register_topic_checks(
    "preconditioned_gd", control_id="preconditioned_gd.single_layer.optimal_loss", control_param="Sigma")
