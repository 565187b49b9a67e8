"""Named settings of a check: what a researcher may change, declared in one place.

A check declares each size it runs at as a :class:`Setting` (a name from the paper's symbols
where there is one: ``N``, ``D``, ``d``, ``T``, ``w_init``, ``spectrum``, ``samples``, ...),
with a kind, the quick and full values, the allowed range and one line of doc::

    @check("localization.rho.mc_gaussian", ..., settings=[
        Setting("d", "ints", quick=(2, 8, 32), full=(2, 8, 32, 128), low=1, high=4096,
                doc="token dimensions d (one Monte Carlo experiment each)"),
        Setting("samples", "int", quick=30_000, full=40_000, low=100, doc="samples per d"),
    ])
    def mc_gaussian(ctx):
        for d in ctx.setting("d"): ...

``python -m verify settings ID`` lists them; ``--set NAME=VALUE`` overrides one for a run
(:func:`parse_assignment`), validated with one line naming the setting; every result records
the settings it ran with.

Kinds
-----
``int``, ``float``: one number in ``[low, high]`` (``float`` may be log-spaced in a sweep; the
kind does not care). ``ints``, ``floats``: a non-empty list of such numbers (``--set d=2,8``; a
single value is a one-element list); ``paired_with="M"`` makes a list one value per item of the
list ``M`` (checked when a run's settings are resolved, and for ``--set`` before anything runs).
``bool``: ``true``/``false``. ``choice``: one of
``choices``. ``spectrum``: a covariance spectrum in a small language (:func:`parse_spectrum`):
``white``, ``power:ALPHA`` (eigenvalues proportional to k^-ALPHA), or explicit eigenvalues
``0.4,0.3,0.2,0.1``; its value is a :class:`Spectrum`, turned into eigenvalues for a dimension
by :meth:`Spectrum.eigenvalues`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Setting", "Spectrum", "KINDS", "parse_spectrum", "parse_assignment", "resolve", "check_pairs"]

KINDS = ("int", "float", "ints", "floats", "bool", "choice", "spectrum")


@dataclass(frozen=True)
class Spectrum:
    """A covariance spectrum: ``white``, ``power`` (with ``alpha``) or explicit ``values``."""

    form: str
    alpha: float = 0.0
    values: tuple[float, ...] = ()

    def eigenvalues(self, D: int | None = None, *, trace: float | None = None) -> list[float]:
        """The eigenvalues, descending: ``D`` of them for a white or power spectrum (an explicit
        spectrum has its own length and ignores ``D``), scaled to sum to ``trace`` when given."""
        if self.form == "values":
            lam = list(self.values)
        else:
            if D is None:
                raise ValueError("spectrum: a white or power spectrum needs the dimension D")
            lam = [1.0] * D if self.form == "white" else [(k + 1) ** -self.alpha for k in range(D)]
        if trace is not None:
            s = sum(lam)
            lam = [x * trace / s for x in lam]
        return lam

    def __str__(self) -> str:
        if self.form == "white":
            return "white"
        if self.form == "power":
            return f"power:{self.alpha:g}"
        return ",".join(f"{v:g}" for v in self.values)


def parse_spectrum(text: str, name: str = "spectrum") -> Spectrum:
    """``white``, ``power:ALPHA`` (ALPHA >= 0) or comma-separated positive eigenvalues."""
    if isinstance(text, Spectrum):
        return text
    if isinstance(text, (list, tuple)):
        text = ",".join(str(x) for x in text)
    t = str(text).strip().lower()
    if t == "white":
        return Spectrum("white")
    if t.startswith("power:"):
        try:
            alpha = float(t[6:])
        except ValueError:
            raise ValueError(f"{name}: expected power:ALPHA with a number ALPHA, got {text!r}") from None
        if not math.isfinite(alpha) or alpha < 0:
            raise ValueError(f"{name}: power:ALPHA needs a finite ALPHA >= 0, got {text!r}")
        return Spectrum("power", alpha=alpha)
    try:
        values = tuple(float(x) for x in t.split(","))
    except ValueError:
        raise ValueError(f"{name}: expected white, power:ALPHA or eigenvalues like 0.4,0.3,0.2, got {text!r}") \
            from None
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"{name}: eigenvalues must be finite and > 0, got {text!r}")
    return Spectrum("values", values=tuple(sorted(values, reverse=True)))


@dataclass(frozen=True)
class Setting:
    """One named setting of a check (see the module docstring)."""

    name: str
    kind: str
    quick: Any
    full: Any
    doc: str
    low: float | None = None
    high: float | None = None
    choices: tuple = ()
    sweep: tuple = field(default=(), compare=False)  # suggested grid, for the docs
    paired_with: str | None = None  # a list setting of the same length: one value per item of it

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {self.kind!r}")
        if not self.name.isidentifier():
            raise ValueError(f"name: {self.name!r} is not a valid setting name")
        if self.kind == "choice" and not self.choices:
            raise ValueError(f"choices: a choice setting ({self.name}) needs its choices")
        if self.paired_with is not None and self.kind not in ("ints", "floats"):
            raise ValueError(f"paired_with: only a list setting can be paired ({self.name} is {self.kind})")
        for profile in ("quick", "full"):  # the declared defaults must themselves be valid
            self.validate(getattr(self, profile))

    def default(self, profile: str):
        return self.validate(self.full if profile == "full" else self.quick)

    def validate(self, value):
        """The value normalised (a tuple for list kinds, a Spectrum for ``spectrum``);
        ``ValueError`` starting with the setting's name otherwise."""
        k = self.kind
        if k == "spectrum":
            return parse_spectrum(value, self.name)
        if k == "bool":
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "1", "yes"):
                return True
            if str(value).lower() in ("false", "0", "no"):
                return False
            raise ValueError(f"{self.name}: expected true or false, got {value!r}")
        if k == "choice":
            if value not in self.choices:
                raise ValueError(f"{self.name}: expected one of {', '.join(map(str, self.choices))}, got {value!r}")
            return value
        if k in ("ints", "floats"):
            items = value.split(",") if isinstance(value, str) else (
                list(value) if isinstance(value, (list, tuple)) else [value])
            if not items:
                raise ValueError(f"{self.name}: expected at least one value")
            return tuple(self._number(x, k[:-1]) for x in items)
        return self._number(value, k)

    def _number(self, x, kind: str):
        what = "an integer" if kind == "int" else "a number"
        if isinstance(x, bool):
            raise ValueError(f"{self.name}: expected {what}, got {x!r}")
        try:
            v = float(x) if not isinstance(x, int) else x
        except (TypeError, ValueError):
            raise ValueError(f"{self.name}: expected {what}, got {x!r}") from None
        if kind == "int":
            if isinstance(v, float):
                if not v.is_integer():
                    raise ValueError(f"{self.name}: expected an integer, got {x!r}")
                v = int(v)
        elif not math.isfinite(v):
            raise ValueError(f"{self.name}: expected a finite number, got {x!r}")
        else:
            v = float(v)
        if self.low is not None and v < self.low:
            raise ValueError(f"{self.name}: must be >= {self.low:g}, got {x}")
        if self.high is not None and v > self.high:
            raise ValueError(f"{self.name}: must be <= {self.high:g}, got {x}")
        return v

    def describe(self) -> dict:
        rng = ("" if self.low is None else f">= {self.low:g}") + (
            "" if self.high is None else (", " if self.low is not None else "") + f"<= {self.high:g}")
        if self.kind == "choice":
            rng = " | ".join(map(str, self.choices))
        return {"name": self.name, "kind": self.kind, "quick": _shown(self.default("quick")),
                "full": _shown(self.default("full")), "range": rng, "doc": self.doc}


def _shown(v):
    if isinstance(v, tuple):
        return ",".join(_shown(x) for x in v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def parse_assignment(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` -> (NAME, VALUE); ``ValueError`` naming ``--set`` otherwise."""
    name, sep, value = str(text).partition("=")
    if not sep or not name.strip() or not value.strip():
        raise ValueError(f"--set: expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def resolve(settings: tuple[Setting, ...], profile: str, overrides: dict | None, check_id: str) -> dict:
    """The settings of one run: each declared setting's value for ``profile``, with ``overrides``
    (name -> value, validated) applied. An override of a setting the check does not declare
    raises ``ValueError`` naming it and the settings there are."""
    declared = {s.name: s for s in settings}
    out = {s.name: s.default(profile) for s in settings}
    for name, value in (overrides or {}).items():
        if name not in declared:
            known = ", ".join(declared) or "none"
            raise ValueError(f"{name}: {check_id} has no setting {name!r} (its settings: {known})")
        out[name] = declared[name].validate(value)
    check_pairs(settings, out)
    return out


def check_pairs(settings: tuple[Setting, ...], values: dict) -> None:
    """Each list setting ``paired_with`` another must have one value per item of it; otherwise
    ``ValueError`` naming the setting (``K: expected 5 values, one per M (...), got 2``)."""
    for s in settings:
        if s.paired_with is None:
            continue
        mine, theirs = values[s.name], values[s.paired_with]
        if len(mine) != len(theirs):
            shown = ",".join(_shown(v) for v in theirs)
            raise ValueError(f"{s.name}: expected {len(theirs)} values, one per {s.paired_with} "
                             f"({s.paired_with}={shown}), got {len(mine)}")


def as_data(values: dict) -> dict:
    """Settings as plain JSON data (a spectrum as its text, lists as lists)."""
    out = {}
    for k, v in values.items():
        if isinstance(v, Spectrum):
            out[k] = str(v)
        elif isinstance(v, tuple):
            out[k] = list(v)
        else:
            out[k] = v
    return out
