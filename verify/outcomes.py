"""Builders of the common :class:`~verify.registry.Outcome` kinds.

A Monte Carlo check compares sample means with a closed form through z-scores
``(mean - predicted) / SE`` and passes when the largest |z| is within the family-wise
threshold :func:`verify.stats.z_threshold` (see :mod:`verify.stats`); an exact check compares
two computations of the same quantity with a relative error. Each comes with negative
controls, a wrong form the same statistic must reject::

    from verify.outcomes import z_control, z_test

    est = acc.result()                               # a verify.stats.MeanEstimate
    return z_test(est, predicted, criterion="max |z| over the 9 entries of E[x x^T]",
                  controls=[z_control("Lambda transposed", est, Lam.T, predicted)])

:func:`z_test` sets ``discrepancy = max |z|`` and ``tolerance = z_threshold(n_tests)``;
:func:`z_control` builds a control on the same estimate with the same threshold and, as its
``expected`` statistic, ``max |wrong - predicted| / SE``. :func:`exact_identity` sets
``discrepancy`` to the relative error :func:`verify.stats.rel_max` (or
:func:`verify.stats.rel_err` with a ``scale``) and :func:`exact_control` is its control.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from verify.registry import Control, Outcome
from verify.stats import MeanEstimate, max_abs_z, rel_err, rel_max, z_threshold

__all__ = ["as_estimate", "z_score", "z_control", "z_test", "exact_control", "exact_identity"]

_UNSET: Any = object()


def as_estimate(measured) -> MeanEstimate:
    """``measured`` as a :class:`~verify.stats.MeanEstimate`: an estimate itself, or a pair
    ``(mean, se)`` (the sample count is then unknown and recorded as 0)."""
    if isinstance(measured, MeanEstimate):
        return measured
    try:
        mean, se = measured
    except (TypeError, ValueError):
        raise ValueError(f"measured: expected a MeanEstimate or a pair (mean, se), got {measured!r}") from None
    return MeanEstimate(np.asarray(mean, dtype=float), np.asarray(se, dtype=float), 0)


def z_score(mean, se, predicted) -> float:
    """``(mean - predicted) / se`` of one scalar statistic."""
    return float((mean - predicted) / se)


def z_control(name: str, measured, wrong, predicted=None, *, n_tests: int | None = None,
              tolerance: float | None = None, expected: float | None = None) -> Control:
    """A negative control of a z-test: ``max |z|`` of the wrong form ``wrong`` against the same
    estimate, rejected when above ``tolerance`` (default ``z_threshold(n_tests)``, ``n_tests``
    defaulting to the number of entries). ``expected``: given, or ``max |wrong - predicted| /
    SE`` when the true form ``predicted`` is given (the z the wrong form gets on average)."""
    est = as_estimate(measured)
    if tolerance is None:
        tolerance = z_threshold(n_tests if n_tests is not None else int(np.size(est.mean)))
    if expected is None and predicted is not None:
        expected = float(np.max(np.abs(np.asarray(wrong, dtype=float) - np.asarray(predicted, dtype=float))
                                / est.se))
    return Control(name, max_abs_z(est, wrong), tolerance, expected=expected)


def z_test(measured, predicted, *, criterion: str, n_tests: int | None = None,
           controls: Iterable[Control] = (), details: dict | None = None, figures: dict | None = None,
           report_measured: Any = _UNSET, report_predicted: Any = _UNSET) -> Outcome:
    """The outcome of a Monte Carlo z-test: ``discrepancy = max |z|`` of ``predicted`` against
    the estimate ``measured`` (a :class:`~verify.stats.MeanEstimate` or ``(mean, se)``),
    ``tolerance = z_threshold(n_tests)``, ``n_tests`` defaulting to the number of entries.

    ``measured`` and ``predicted`` of the outcome are the estimate's mean and ``predicted`` as
    lists, unless ``report_measured`` / ``report_predicted`` give what to show instead.
    """
    est = as_estimate(measured)
    n = n_tests if n_tests is not None else int(np.size(est.mean))
    return Outcome(
        measured=np.asarray(est.mean).tolist() if report_measured is _UNSET else report_measured,
        predicted=np.asarray(predicted).tolist() if report_predicted is _UNSET else report_predicted,
        discrepancy=max_abs_z(est, predicted), tolerance=z_threshold(n), criterion=criterion,
        controls=list(controls), details=dict(details or {}), figures=dict(figures or {}),
    )


def _relative(measured, predicted, scale: float | None) -> float:
    return rel_max(measured, predicted) if scale is None else rel_err(measured, predicted, scale)


def exact_control(name: str, measured, wrong, tolerance: float, *, scale: float | None = None,
                  expected: float | None = None) -> Control:
    """A negative control of an exact identity: the relative error of ``measured`` against the
    wrong form ``wrong`` (:func:`verify.stats.rel_max`, or :func:`verify.stats.rel_err` with
    ``scale``), rejected when above ``tolerance``."""
    return Control(name, _relative(measured, wrong, scale), tolerance, expected=expected)


def exact_identity(measured, predicted, *, tolerance: float, criterion: str, scale: float | None = None,
                   controls: Iterable[Control] = (), details: dict | None = None, figures: dict | None = None,
                   report_measured: Any = _UNSET, report_predicted: Any = _UNSET) -> Outcome:
    """The outcome of an exact identity: ``discrepancy`` is the relative error of ``measured``
    against ``predicted``, ``max |a - b| / max |b|`` (:func:`verify.stats.rel_max`), or with an
    absolute floor ``scale`` (:func:`verify.stats.rel_err`); ``tolerance`` is the round-off
    allowed. The outcome shows both as lists unless ``report_measured`` /
    ``report_predicted`` are given."""
    return Outcome(
        measured=np.asarray(measured).tolist() if report_measured is _UNSET else report_measured,
        predicted=np.asarray(predicted).tolist() if report_predicted is _UNSET else report_predicted,
        discrepancy=_relative(measured, predicted, scale), tolerance=float(tolerance), criterion=criterion,
        controls=list(controls), details=dict(details or {}), figures=dict(figures or {}),
    )
