"""Closed forms of how attention learns, derived in sympy and emitted as numeric functions.

Each result of a paper is a registered :class:`ClosedForm` with a stable id::

    >>> import theory
    >>> cf = theory.get("linear_attention.data.lambda_hat_sq")
    >>> cf.source
    'Zhang, Singh, Latham, Saxe 2025, eqs. 15, 30, 31'
    >>> cf(Lambda=[1.0, 0.5], N=4)
    array([[1.625, 0.   ],
           [0.   , 0.5  ]])

``get(id)`` returns a record, ``ids()`` lists them. Records derive their sympy
expression on first use (``cf.expr``), and emit numpy / mpmath / torch functions once.
``import theory`` is cheap: sympy is imported only when a record is first used.

Command line: ``python -m theory list | show ID | eval ID --json '{...}'``.
"""

from .params import Param
from .registry import ClosedForm, get, ids, records

__all__ = ["ClosedForm", "Param", "get", "ids", "records"]
