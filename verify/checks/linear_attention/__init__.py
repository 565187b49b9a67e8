"""Checks of the linear_attention closed forms (Zhang, Singh, Latham, Saxe 2025): one module per part of the ids
(``linear_attention.<part>.*``), with the method in the name where a part has several (``_flow``,
``_torch``, ``_monte_carlo``); ``symbolic`` holds the topic-wide symbolic and high-precision checks.
"""
