"""``saxe_linear.symbolic_printed_forms`` (sympy proves the derived forms equal the printed ones)
and ``saxe_linear.high_precision`` (numpy against mpmath at 50 digits), from the core's factory."""

from verify import register_topic_checks

symbolic_printed_forms, high_precision = register_topic_checks(
    "saxe_linear", control_id="saxe_linear.modes.strength", control_param="s")
