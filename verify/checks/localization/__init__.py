"""Checks of the localization closed forms (Bao, Hataya, Karakida 2024): one module per part of the ids
(``localization.<part>.*``), with the method in the name where a part has several (``_flow``,
``_torch``, ``_monte_carlo``); ``symbolic`` holds the topic-wide symbolic and high-precision checks.
"""
