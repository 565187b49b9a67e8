"""Strict JSON values for ``results.json`` and the archive.

:func:`to_jsonable` turns what a check returns (numbers, numpy arrays and scalars, torch
tensors, nested dicts, lists and tuples) into values ``json.dumps(..., allow_nan=False)``
accepts: a non-finite float becomes its string (``"nan"``, ``"inf"``, ``"-inf"``), an object
JSON has no type for becomes ``str(obj)``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["to_jsonable"]


def to_jsonable(x):
    """``x`` as strict JSON: dict keys as strings, tuples and arrays as lists, numpy and torch
    scalars as Python numbers, non-finite floats and unknown objects as strings."""
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return to_jsonable(x.tolist())
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        return v if math.isfinite(v) else str(v)
    if hasattr(x, "item") and callable(x.item):  # torch tensors and scalars
        try:
            return to_jsonable(x.item())
        except (ValueError, RuntimeError):
            return to_jsonable(x.tolist())
    return str(x)
