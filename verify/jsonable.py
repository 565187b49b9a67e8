"""Strict JSON values for ``results.json`` and the archive.

:func:`to_jsonable` turns what a check returns (numbers, numpy arrays and scalars, torch
tensors, nested dicts, lists and tuples) into values ``json.dumps(..., allow_nan=False)``
accepts: a non-finite float becomes ``null``, and its place and value (``"nan"``, ``"inf"``,
``"-inf"``) are recorded in the list passed as ``nonfinite`` (a result record keeps them as its
``nonfinite`` field, so that nothing is lost); an object JSON has no type for becomes ``str(obj)``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["to_jsonable"]


def to_jsonable(x, nonfinite: list | None = None, path: str = ""):
    """``x`` as strict JSON: dict keys as strings, tuples and arrays as lists, numpy and torch
    scalars as Python numbers, non-finite floats as ``None`` (their ``(path, "nan" | "inf" |
    "-inf")`` appended to ``nonfinite`` when given; a path is dotted keys and ``[i]`` indices),
    unknown objects as strings."""
    if isinstance(x, dict):
        return {str(k): to_jsonable(v, nonfinite, f"{path}.{k}" if path else str(k)) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v, nonfinite, f"{path}[{i}]") for i, v in enumerate(x)]
    if isinstance(x, np.ndarray):
        return to_jsonable(x.tolist(), nonfinite, path)
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        if math.isfinite(v):
            return v
        if nonfinite is not None:
            nonfinite.append((path, str(v)))
        return None
    if hasattr(x, "item") and callable(x.item):  # torch tensors and scalars
        try:
            return to_jsonable(x.item(), nonfinite, path)
        except (ValueError, RuntimeError):
            return to_jsonable(x.tolist(), nonfinite, path)
    return str(x)
