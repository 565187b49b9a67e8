"""Checks: the unit of evidence, and their registry.

A check tests one or more closed forms (``covers``) by one method and returns an
:class:`Outcome`: what it measured, what the theory predicted, the discrepancy, the
tolerance and why, and its negative controls (a wrong form the same test must reject).
A check passes when its discrepancy is within tolerance *and* every negative control is
rejected; a check that could not have failed is a defect.

Writing a check::

    from verify import check, Outcome, Control

    @check("linear_attention.data.mc_moments",
           covers=["linear_attention.data.lambda_hat_sq"], method="monte_carlo",
           title="Monte Carlo of the task moments")
    def mc_moments(ctx):
        rng = ctx.rng                       # numpy Generator, seeded per check
        n = ctx.pick(quick=10**5, full=10**7)
        ...
        return Outcome(measured=..., predicted=..., discrepancy=max_z, tolerance=z_crit,
                       criterion="max |z| over 81 entries < z_crit (family-wise 1e-6)",
                       controls=[Control("swapped Kronecker order", z_bad, z_crit)])

Profiles: ``quick`` (default; the whole suite in minutes on 2 cores) and ``full`` (the
papers' sizes). Randomness comes only from ``ctx.rng`` / ``ctx.torch_generator()``,
derived from the run seed and the check id, so one seed gives one report.
"""

from __future__ import annotations

import hashlib
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from verify.jsonable import to_jsonable

__all__ = ["Check", "CheckResult", "Context", "Control", "Outcome", "check", "all_checks", "aliases",
           "get_check", "run_check", "METHODS", "PROFILES"]

METHODS = ("monte_carlo", "exact_flow", "torch", "symbolic", "high_precision", "optimization")
PROFILES = ("quick", "full")

_CHECKS: dict[str, "Check"] = {}
_ALIASES: dict[str, str] = {}


@dataclass
class Control:
    """A negative control: a wrong form (or convention) the check must reject.

    ``rejected`` is ``discrepancy > tolerance``, computed (a NaN discrepancy is not a
    rejection). ``expected``: the statistic the wrong form is expected to give (for a z-test,
    |wrong - true| / standard error at the sample size used), stated so that a reader can see
    the control could not pass by chance: it should be far above ``tolerance``.
    """

    name: str
    discrepancy: float
    tolerance: float
    expected: float | None = None

    @property
    def rejected(self) -> bool:
        return bool(self.discrepancy > self.tolerance)

    def as_dict(self) -> dict:
        return {"name": self.name, "discrepancy": self.discrepancy, "tolerance": self.tolerance,
                "rejected": self.rejected, "expected": self.expected}


@dataclass
class Outcome:
    """What a check function returns.

    Attributes
    ----------
    measured, predicted : Any
        The simulated and the closed-form values (numbers, lists; JSON-serialisable).
    discrepancy : float
        The statistic compared with ``tolerance`` (e.g. max |z|, relative error).
    tolerance : float
        Pass threshold for ``discrepancy``.
    criterion : str
        One line: what is compared and why the tolerance is what it is.
    controls : list of Control
        Negative controls; each must be rejected.
    passed : bool or None
        Defaults to ``discrepancy <= tolerance``.
    details : dict
        Further numbers for the report (sample sizes, per-case values, ...).
    figures : dict
        Data for figures: name -> dict of arrays (drawn by the report when matplotlib is there).
    """

    measured: Any
    predicted: Any
    discrepancy: float
    tolerance: float
    criterion: str
    controls: list[Control] = field(default_factory=list)
    passed: bool | None = None
    details: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.passed is None:
            self.passed = bool(np.isfinite(self.discrepancy) and self.discrepancy <= self.tolerance)


@dataclass
class CheckResult:
    """One record of results.json."""

    id: str
    title: str
    covers: list[str]
    method: str
    profile: str
    seed: int
    passed: bool
    measured: Any
    predicted: Any
    discrepancy: float
    tolerance: float
    criterion: str
    controls: list[dict]
    details: dict
    seconds: float
    error: str | None = None
    traceback: str | None = None
    figures: dict = field(default_factory=dict, repr=False)
    settings: dict = field(default_factory=dict)
    #: The figures drawn ahead of the report (:func:`verify.report.draw_ahead`); not part of the record.
    drawn: dict = field(default_factory=dict, repr=False, compare=False)

    def as_json(self) -> dict:
        """The record as strict JSON; non-finite numbers are ``null`` and listed, with where they
        are, in ``nonfinite`` (``{"discrepancy": "nan", "measured.x[2]": "inf"}``)."""
        flags: list = []
        d = to_jsonable({k: v for k, v in self.__dict__.items() if k not in ("figures", "drawn")}, flags)
        if flags:
            d["nonfinite"] = dict(flags)
        return d


@dataclass
class Context:
    """What a check gets: profile, seeded randomness, device, progress."""

    check_id: str
    profile: str = "quick"
    seed: int = 0
    device: str = "cpu"
    progress: Callable[[Iterable, str], Iterable] | None = None
    settings: dict = field(default_factory=dict)

    def __post_init__(self):
        digest = hashlib.sha256(self.check_id.encode()).digest()
        self._seq = np.random.SeedSequence([self.seed, int.from_bytes(digest[:8], "little")])
        self.rng = np.random.default_rng(self._seq)

    def pick(self, quick, full):
        """The value for the current profile (for a size that is not a declared setting)."""
        return full if self.profile == "full" else quick

    def setting(self, name: str):
        """The value of the declared setting ``name`` for this run (its profile's value, or the
        value given with ``--set``); see :mod:`verify.settings`."""
        try:
            return self.settings[name]
        except KeyError:
            raise KeyError(f"{self.check_id} declares no setting {name!r} "
                           f"(declared: {', '.join(self.settings) or 'none'})") from None

    def spawn(self, n: int) -> list[np.random.Generator]:
        """``n`` independent generators (SeedSequence.spawn), e.g. for parallel streams."""
        return [np.random.default_rng(s) for s in self._seq.spawn(n)]

    def torch_generator(self, device: str | None = None):
        """A ``torch.Generator`` seeded from this check's seed sequence."""
        import torch

        g = torch.Generator(device=device or self.device)
        g.manual_seed(int(self._seq.generate_state(1, np.uint64)[0] & 0x7FFF_FFFF_FFFF_FFFF))
        return g

    def iterate(self, iterable: Iterable, desc: str = "") -> Iterable:
        """Wrap a long loop with the run's progress bar (no-op when there is none)."""
        return self.progress(iterable, desc) if self.progress else iterable


@dataclass
class Check:
    id: str
    title: str
    covers: tuple[str, ...]
    method: str
    func: Callable[[Context], Outcome]
    needs: tuple[str, ...] = ()
    decides: tuple[str, ...] = ()
    refutes: tuple[tuple[str, str], ...] = ()
    aliases: tuple[str, ...] = ()
    settings: tuple = ()
    shares: str | None = None

    def available(self) -> str | None:
        """None when the check can run here, else why not (a missing optional package)."""
        import importlib.util

        for mod in self.needs:
            if importlib.util.find_spec(mod) is None:
                return f"needs the optional package {mod!r}"
        return None


def check(id: str, *, covers: Iterable[str], method: str, title: str, needs: Iterable[str] = (),
          decides: Iterable[str] = (), refutes: dict[str, str] | None = None,
          aliases: Iterable[str] = (), settings: Iterable = (), shares: str | None = None):
    """Decorator registering a check function ``f(ctx) -> Outcome``.

    ``method``: one of :data:`METHODS`: Monte Carlo, the exact gradient flow, torch training, symbolic
    identities, high-precision evaluation, or ``optimization`` (a numerical search for an extremum a
    closed form claims, e.g. App. E.7's minimum-norm lemma).
    ``decides``: erratum records (a subset of ``covers``) whose printed form this check puts
    to the test against the derived one: one of its negative controls is the printed form,
    so the check passing means the numbers side with the derivation.
    ``refutes``: errata in statements that are not registered closed forms (an identity
    between computations, a gradient over token matrices): ``{"where in the paper": "what is
    wrong and what holds"}``; one of the check's negative controls is the statement as printed.
    ``aliases``: former ids of the check; :func:`get_check` and the command line still accept
    them and say the new name.
    ``needs``: optional packages the check imports (torch for every ``method="torch"`` check, declared
    or not); where one is missing the check is listed and its run skipped, saying why.
    ``settings``: the check's :class:`verify.settings.Setting` objects (the sizes it runs at,
    each with its quick and full value and allowed range); the function reads them with
    ``ctx.setting(name)``.
    ``shares``: the name of a computation this check shares with other checks through a cache of
    its process (one training grid behind several figures, say). Run serially the first of them
    computes it and the others reuse it; on Dask (:mod:`verify.execute`) the checks that share one,
    at one seed, profile, device and settings, run as one task, so that it is computed once.
    """
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    if shares is not None and (not isinstance(shares, str) or not shares.strip()):
        raise ValueError(f"shares: expected a non-empty name, got {shares!r}")
    needs = tuple(needs)
    if method == "torch" and "torch" not in needs:  # a torch check needs torch, declared or not
        needs += ("torch",)
    covers, decides = tuple(covers), tuple(decides)
    if not set(decides) <= set(covers):
        raise ValueError(f"decides: {sorted(set(decides) - set(covers))} not in covers of {id}")

    aliases = tuple(aliases)
    settings = tuple(settings)
    names = [st.name for st in settings]
    if len(set(names)) != len(names):
        raise ValueError(f"settings: {id} declares a setting twice ({names})")
    for st in settings:
        if st.paired_with is not None and st.paired_with not in names:
            raise ValueError(f"settings: {st.name} of {id} is paired with {st.paired_with!r}, "
                             "which it does not declare")

    def deco(func):
        for name in (id, *aliases):
            if name in _CHECKS or name in _ALIASES:
                raise ValueError(f"id: check {name!r} registered twice")
        _CHECKS[id] = Check(id, title, covers, method, func, needs, decides,
                            tuple((refutes or {}).items()), aliases, settings, shares)
        _ALIASES.update(dict.fromkeys(aliases, id))
        return func

    return deco


def _load():
    import importlib

    importlib.import_module(f"{__package__}.checks")  # registers every check module


def all_checks() -> list[Check]:
    """All registered checks, in registration order."""
    _load()
    return list(_CHECKS.values())


def aliases() -> dict[str, str]:
    """Former check ids and the ids they now have."""
    _load()
    return dict(_ALIASES)


def get_check(id: str) -> Check:
    """The check ``id``; a former id (see :func:`aliases`) gives its check with a warning."""
    _load()
    if id in _CHECKS:
        return _CHECKS[id]
    if id in _ALIASES:
        warnings.warn(f"check {id!r} is now {_ALIASES[id]!r}", FutureWarning, stacklevel=2)
        return _CHECKS[_ALIASES[id]]
    raise ValueError(f"id: unknown check {id!r}")


def run_check(chk: Check, profile: str = "quick", seed: int = 0, device: str = "cpu",
              progress=None, settings: dict | None = None) -> CheckResult:
    """Run one check; an exception becomes a failed result carrying the error.

    ``settings``: values for some of the check's declared settings (name -> value or text, as
    ``--set`` gives them); an unknown name or a bad value raises ``ValueError`` naming it before
    the check runs. The result records every setting the run used."""
    from .settings import as_data, resolve

    if profile not in PROFILES:
        raise ValueError(f"profile: expected one of {PROFILES}, got {profile!r}")
    values = resolve(chk.settings, profile, settings, chk.id)
    ctx = Context(chk.id, profile=profile, seed=seed, device=device, progress=progress, settings=values)
    t0 = time.perf_counter()
    try:
        out = chk.func(ctx)
        error = trace = None
    except Exception as exc:  # a crashing check is a failed check, reported with its error
        out = Outcome(None, None, float("nan"), float("nan"), "raised an exception", passed=False)
        error = f"{type(exc).__name__}: {exc}"
        trace = traceback.format_exc()
    seconds = time.perf_counter() - t0
    controls_ok = all(c.rejected for c in out.controls)
    return CheckResult(
        id=chk.id, title=chk.title, covers=list(chk.covers), method=chk.method, profile=profile,
        seed=seed, passed=bool(out.passed and controls_ok and error is None),
        measured=out.measured, predicted=out.predicted, discrepancy=float(out.discrepancy),
        tolerance=float(out.tolerance), criterion=out.criterion,
        controls=[c.as_dict() for c in out.controls], details=out.details, seconds=seconds,
        error=error, traceback=trace, figures=out.figures, settings=as_data(values),
    )

