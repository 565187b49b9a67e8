"""The closed-form record and the registry.

A :class:`ClosedForm` is one result of one paper: a stable id, the source equation, an
exactness status, typed parameters, the sympy expression *derived* by the toolkit, the
paper's printed form where the two differ, and numeric functions emitted from the
expression for numpy, mpmath and torch (created once, on first use, kept for the process and
stored in the cache on disk of :mod:`theory.cache`, so a later process loads them without deriving).

Topic packages (one per paper: ``theory/<topic>/``, or an installed plug-in's package named in
the entry-point group ``attention_dynamics_theory.topics``; see :mod:`theory.papers`) create
records with :func:`register`. :func:`get` and :func:`ids` discover the topics and import every
module of every topic package on first use, so ``import theory`` does not import sympy, and
adding a module or a topic needs no list to be edited.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

from .params import SCALAR_KINDS, Param, detached_values

__all__ = ["ClosedForm", "register", "get", "ids", "records", "import_package", "STATUSES", "PRINTED_ORIGINS"]

STATUSES = ("exact", "asymptotic", "approximate", "heuristic")
#: Where a record's :attr:`~ClosedForm.printed` form comes from: ``paper`` (the paper prints it) or
#: ``worked`` (worked out by hand from the paper's statement where the paper prints no formula).
PRINTED_ORIGINS = ("paper", "worked")


def import_package(package: str) -> list[str]:
    """Import ``package`` and every module in it, recursively (name order at each level); return
    the modules' names. Importing a topic's modules registers its records."""
    import pkgutil

    pkg = importlib.import_module(package)
    names = [package]
    for info in sorted(pkgutil.iter_modules(getattr(pkg, "__path__", [])), key=lambda m: m.name):
        name = f"{package}.{info.name}"
        if info.ispkg:
            names += import_package(name)
        else:
            importlib.import_module(name)
            names.append(name)
    return names


_REGISTRY: dict[str, "ClosedForm"] = {}
_LOADED = False


@dataclass(eq=False)
class ClosedForm:
    """One registered closed form.

    Attributes
    ----------
    id : str
        ``<topic>.<part>.<name>``, e.g. ``linear_attention.merged.sigma``.
    title : str
        One line saying what the value is.
    source : str
        Where the result is in the topic's paper, e.g. ``eq. 10`` or ``Lemma 2, eq. 14``; the
        paper itself is the topic's (:attr:`citation` joins the two).
    status : str
        ``exact``, ``asymptotic``, ``approximate`` or ``heuristic``.
    params : tuple of theory.params.Param
        Parameters in call order.
    derive : callable
        ``derive() -> sympy expression``; the derivation (cached in :attr:`expr`).
    printed : callable or None
        ``printed() -> sympy expression``: the paper's form, where the paper prints one (or, with
        ``printed_origin="worked"``, a form worked out by hand from the paper's statement).
    printed_origin : str
        ``paper`` (default): :attr:`printed` is the form the paper prints. ``worked``: the paper
        prints no formula (e.g. Theorem 2 of Ahn et al. 2023 states no step sizes) and
        :attr:`printed` is a form worked out by hand from its statement; it is compared with the
        derivation like a printed form, but ``python -m theory show``, the README's coverage table
        and the errata page label it as worked, not as the paper's (:attr:`printed_label`). A
        worked form carries no erratum: a mismatch would be a slip of the worked form, not of the paper.
    stable : callable or None
        ``stable() -> sympy expression``: a rewrite of the derived form used for numerics
        (finite at extreme parameters); proved equal to :attr:`expr` by the tests.
    output : str
        ``scalar``, ``matrix`` or ``vector`` (a column returned flat).
    domain : callable or None
        ``domain(values, dims)`` raises ``ValueError`` (naming a parameter) where the
        parameters are individually valid but the closed form is not defined together.
    derived : callable or None
        ``derived(values, dims, backend) -> dict``: values of auxiliary symbols computed from the
        parameters (e.g. the projector ``P`` onto chosen eigen-directions of Lambda), passed
        to the emitted function after the parameters, in the order of ``derived_names``;
        computed in ``backend`` (with mpmath at the working precision, from the exact values of
        :meth:`validate` (``mpmath.mpf``, ``mpmath.matrix``), e.g. eigen-projectors by
        ``mpmath.eigsy``, so that a high-precision value is not built on float64 intermediates).
    derived_names : tuple of str
        Names (in the topic's symbol table, :attr:`symbols`) of the auxiliary symbols.
    evaluate : callable or None
        ``evaluate(backend, values, dims) -> value`` for a record defined by a recursion or an
        implicit equation that no emitted expression evaluates (e.g. iterating a sequence to
        step ``s``; with mpmath, ``values`` holds the exact ``mpmath.mpf`` values): used in place
        of the emitted function; ``expr`` then states the defining relation (an ``Eq``) and the
        printed form is compared against that relation.
    example : dict or None
        A parameter point that shows the record at work; for an erratum whose printed form
        differs only on special points (e.g. boundary values of a limit), a point where the two
        differ numerically.
    length : callable or None
        ``length(values, dims) -> int`` for a ``vector`` output whose expression is padded
        to a fixed size (e.g. step sizes of L <= 3 layers): only the first ``length``
        entries are returned.
    doc : str
        Longer explanation: assumptions, conventions, what the paper says.
    erratum : str
        Where :attr:`printed` differs from :attr:`expr`: what is wrong in the paper.
    """

    id: str
    title: str
    source: str
    status: str
    params: tuple[Param, ...]
    derive: Callable[[], Any]
    printed: Callable[[], Any] | None = None
    stable: Callable[[], Any] | None = None
    output: str = "scalar"
    domain: Callable[[dict, dict], None] | None = None
    derived: Callable[[dict, dict, str], dict] | None = None
    derived_names: tuple[str, ...] = ()
    length: Callable[[dict, dict], int] | None = None
    evaluate: Callable[[str, dict, dict], Any] | None = None
    example: dict | None = None
    doc: str = ""
    erratum: str = ""
    printed_origin: str = "paper"
    _fns: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status: expected one of {STATUSES}, got {self.status!r}")
        if self.output not in ("scalar", "matrix", "vector"):
            raise ValueError(f"output: expected scalar, matrix or vector, got {self.output!r}")
        if self.length is not None and self.output != "vector":
            raise ValueError("length: only a vector output can be trimmed")
        if self.printed_origin not in PRINTED_ORIGINS:
            raise ValueError(f"printed_origin: expected one of {PRINTED_ORIGINS}, got {self.printed_origin!r}")
        if self.printed_origin == "worked" and (self.printed is None or self.erratum):
            raise ValueError("printed_origin: a worked form needs a printed form and carries no erratum")

    @property
    def printed_label(self) -> str:
        """How :attr:`printed` is presented: ``Printed in the paper``, or for a form worked out from
        the paper's statement (``printed_origin="worked"``) ``Worked form (not printed in the paper)``."""
        return "Printed in the paper" if self.printed_origin == "paper" else "Worked form (not printed in the paper)"

    # -- symbolic -----------------------------------------------------------------
    @cached_property
    def expr(self):
        """The derived sympy expression (computed once; kept in the cache on disk, :mod:`theory.cache`)."""
        return self._form_expr("derived", self.derive)

    @cached_property
    def printed_expr(self):
        """The paper's printed expression, or None."""
        return self._form_expr("printed", self.printed) if self.printed is not None else None

    @cached_property
    def numeric_expr(self):
        """The expression the numeric functions are emitted from."""
        return self._form_expr("stable", self.stable) if self.stable is not None else self.expr

    def _form_expr(self, form: str, build: Callable):
        """The expression ``build()`` of ``form``, from the cache on disk or built (and stored)."""
        from . import cache

        expr = cache.load_expr(self, form)
        if expr is None:
            expr = build()
            cache.store_expr(self, form, expr)
        return expr

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def topic(self) -> str:
        """The topic: the first part of the id."""
        return self.id.split(".", 1)[0]

    @property
    def citation(self) -> str:
        """The paper's short citation and :attr:`source`, e.g. ``Zhang, Singh, Latham, Saxe 2025,
        eq. 10`` (just :attr:`source` for a topic with no declared paper)."""
        from .papers import paper_of

        try:
            return f"{paper_of(self.id).cite}, {self.source}"
        except ValueError:
            return self.source

    @property
    def symbols(self):
        """The symbol table of the record's topic (:func:`theory.papers.symbols_of`)."""
        from .papers import symbols_of

        return symbols_of(self.topic)

    def latex(self, form: str = "derived", **settings) -> str:
        """The expression of ``form`` (``derived``, ``printed``, ``stable``) in LaTeX, the topic's
        symbols typeset as its table declares (:meth:`theory.symbols.Symbols.latex`)."""
        exprs = {"derived": "expr", "printed": "printed_expr", "stable": "numeric_expr"}
        if form not in exprs:
            raise ValueError(f"form: expected one of {tuple(exprs)}, got {form!r}")
        expr = getattr(self, exprs[form])
        if expr is None:
            raise ValueError(f"form: {self.id} has no {form} form")
        return self.symbols.latex(expr, **settings)

    def equal(self, a, b) -> bool:
        """Whether ``a`` and ``b`` (forms of this record: derived, printed, stable) are identical,
        by :func:`theory.compare.equal` told this record's covariance (its first ``covariance``
        parameter) and its eigen-projectors (its derived matrix symbols)."""
        from .compare import equal

        sym = self.symbols
        cov = next((sym(p.name) for p in self.params if p.kind == "covariance"), None)
        projectors = [sym(n) for n in self.derived_names if sym.kind_of(n) == "matrices"]
        return equal(a, b, covariance=cov, projectors=projectors)

    def forms_equal(self, first: str = "derived", second: str = "printed") -> bool:
        """:meth:`equal` of this record's forms ``first`` and ``second`` (``derived``, ``printed``,
        ``stable``). The verdict is a derivation like the forms themselves: kept in the cache on
        disk (:func:`theory.cache.derivation`), keyed by the source that decides the forms and by
        :mod:`theory.compare`, so an edit to either proves it again (as does the cache turned off)."""
        from . import cache

        exprs = {"derived": "expr", "printed": "printed_expr", "stable": "numeric_expr"}
        if first not in exprs:
            raise ValueError(f"first: expected one of {tuple(exprs)}, got {first!r}")
        if second not in exprs:
            raise ValueError(f"second: expected one of {tuple(exprs)}, got {second!r}")
        if "printed" in (first, second) and self.printed is None:
            raise ValueError(f"{'first' if first == 'printed' else 'second'}: {self.id} has no printed form")

        def prove() -> bool:
            return bool(self.equal(getattr(self, exprs[first]), getattr(self, exprs[second])))

        packages = cache._defining_packages(self)
        if packages is None:
            return prove()
        return cache.derivation(f"{self.id}.equal.{first}.{second}", [*packages, "theory.compare"], prove)

    def _args(self):
        from .symbols import dim

        sym = self.symbols
        args = [sym(p.name) for p in self.params] + [sym(n) for n in self.derived_names]
        if "D" not in self.param_names:
            args.append(dim())
        return args

    # -- numeric ------------------------------------------------------------------
    def function(self, backend: str = "numpy") -> Callable:
        """The emitted function for ``backend`` (positional args: params, then D).

        Loaded from the cache on disk (:mod:`theory.cache`) when an entry for this record's
        source exists, without deriving; otherwise derived, emitted and stored there."""
        fn = self._fns.get(backend)
        if fn is None:
            fn = self._fns[backend] = self._emitted("stable" if self.stable is not None else "derived", backend)
        return fn

    def printed_function(self, backend: str = "numpy") -> Callable:
        """The paper's printed form emitted like :meth:`function` (same positional args, same
        cache); ``ValueError`` when the record has no printed form."""
        if self.printed is None:
            raise ValueError(f"id: {self.id} has no printed form")
        key = ("printed", backend)
        fn = self._fns.get(key)
        if fn is None:
            fn = self._fns[key] = self._emitted("printed", backend)
        return fn

    def _emitted(self, form: str, backend: str) -> Callable:
        """The function of ``form`` (``derived``, ``stable`` or ``printed``) for ``backend``: from
        the cache, or emitted (and stored) on a miss."""
        from . import cache

        fn = cache.load(self, backend, form)
        if fn is None:
            from .emit import emit

            expr = self.printed_expr if form == "printed" else self.numeric_expr
            fn = emit(expr, self._args(), backend)
            cache.store(self, backend, form, fn)
        return fn

    def validate(self, kwargs: dict, backend: str = "numpy") -> tuple[dict, dict]:
        """Check names and values; return ``(values, dims)``. Raises ``ValueError``.

        ``backend="mpmath"``: the values returned are the exact ones at the working precision
        (:meth:`theory.params.Param.validate_exact`: ``mpmath.mpf`` scalars, ``mpmath.matrix``
        matrices and vectors), while every check, ``domain`` included, is decided on float64
        copies; a scalar parameter given as an array is refused (the mpmath backend is not
        vectorised). Otherwise the normalised float64 values (or torch tensors)."""
        names = self.param_names
        missing = [n for n in names if n not in kwargs]
        if missing:
            raise ValueError(f"{missing[0]}: missing parameter of {self.id} "
                             f"(expects {', '.join(names)})")
        extra = [n for n in kwargs if n not in names]
        if extra:
            raise ValueError(f"{extra[0]}: unknown parameter of {self.id} "
                             f"(expects {', '.join(names)})")
        dims: dict = {}
        common = _common_dimension(self.params, kwargs)
        # a covariance first, then the parameters of the dimension most of them share: a mismatch
        # is reported on the odd one out (e.g. a 2 x 2 S among 3 x 3 layer matrices names S)
        order = sorted(self.params, key=lambda p: (p.kind != "covariance", _dimension(p, kwargs[p.name]) != common))
        exact = None
        if backend == "mpmath":
            pairs = {p.name: p.validate_exact(kwargs[p.name], dims) for p in order}
            values = {n: checked for n, (checked, _) in pairs.items()}
            exact = {p.name: pairs[p.name][1] for p in self.params}
        else:
            values = {p.name: p.validate(kwargs[p.name], dims) for p in order}
        _check_broadcast(self.params, values)
        plain = detached_values(values)
        if exact is not None:
            import numpy as np

            for p in self.params:
                if p.kind in SCALAR_KINDS and np.ndim(plain[p.name]) > 0:
                    raise ValueError(f"{p.name}: the mpmath backend takes scalars, not arrays")
        if self.domain is not None:
            self.domain(plain, dims)
        return (exact if exact is not None else values), dims

    def __call__(self, backend: str = "numpy", *, printed: bool = False, **kwargs):
        """Evaluate at the given parameters.

        Parameters
        ----------
        backend : {"numpy", "mpmath", "torch"}
            numpy: float64, vectorised over scalar array parameters (a grid): arrays given
            for scalar parameters (``t``, ``N``, ``w_init``, ...) broadcast together by numpy's
            rules, and the value has their broadcast shape, followed by ``(D, D)`` or ``(n,)``
            for a matrix or vector record (one per grid point). A matrix or covariance parameter
            given as a stack ``(S, D, D)`` gives ``S`` values along a leading axis
            (:meth:`_call_stack`; not combined with arrays of scalars). mpmath: at the
            current ``mpmath.mp.dps``; torch: tensors, computed in float64, returned in the
            dtype of the tensor parameters (float32 in, float32 out); autograd flows through
            every tensor parameter, matrices included (see :meth:`_call_torch`). Tensors given
            to numpy or mpmath are read as detached values.

            mpmath is exact in its inputs: a scalar, or an entry of a (nested) list given for a
            matrix, vector or steps parameter, may be an ``int``, a ``float``, an
            ``mpmath.mpf``, a ``fractions.Fraction``, a ``decimal.Decimal`` or a decimal string
            (``"0.1"``, ``"1e-30"``, ``"1/3"``), and a matrix may be an ``mpmath.matrix``. Each
            is taken as the number it denotes, rounded once to the working precision: no
            value passes through float64 (``"0.1"`` is 1/10 to ``mp.dps`` digits, the float
            ``0.1`` is 0.1000000000000000055...). The checks (positivity, a symmetric
            positive-definite covariance, integer indices, the record's ``domain``) are decided
            on float64 copies; what is computed is the exact input. Derived values (the
            eigen-projectors of a covariance by ``mpmath.eigsy``, inverses by
            ``mpmath.inverse``) are computed from it at the working precision too, so a value
            at ``mp.dps = 50`` is right to about 50 digits (less the conditioning of the
            closed form itself). numpy and torch read every input as float64 (strings are
            refused there).
        printed : bool
            Evaluate the paper's printed form instead of the derived one (to show an
            erratum numerically).
        **kwargs
            One value per parameter (see :attr:`params`).
        """
        stacked = _stacked_names(self.params, kwargs)
        if stacked:
            return self._call_stack(kwargs, stacked, backend, printed)
        values, dims = self.validate(kwargs, backend)
        if backend == "torch":
            return self._call_torch(values, dims, printed)
        values = detached_values(values)
        if backend == "numpy":
            import numpy as np

            grid = self.grid_shape(values)
            if grid and self.output != "scalar":  # one matrix (vector) per grid point, stacked
                on_grid = {p.name for p in self.params if p.kind in SCALAR_KINDS and np.ndim(values[p.name]) > 0}
                points = [self._value({n: (np.broadcast_to(v, grid)[i] if n in on_grid else v)
                                       for n, v in values.items()}, dims, backend, printed)
                          for i in np.ndindex(grid)]
                return np.stack(points).reshape(grid + np.shape(points[0]))
            out = self._value(values, dims, backend, printed)
            if grid and np.shape(out) != grid:  # a value constant along some of the grid's axes
                out = np.broadcast_to(out, grid).copy()
            return out
        return self._value(values, dims, backend, printed)

    def of(self, name: str, *, printed: bool = False, **fixed) -> Callable[[Any], Any]:
        """``x -> self(printed=printed, **{name: x}, **fixed)`` (numpy) for many scalar values ``x`` of one
        scalar parameter ``name``, as an integrand or an ODE's right-hand side asks for them.

        The fixed parameters are validated once, with the first ``x``; each later ``x`` by its own
        parameter and the record's ``domain`` at the new values, then the emitted function (or the record's
        ``evaluate``) runs on the arguments validated before: the values of full calls, without their
        validation of every parameter (tens of microseconds per call) at each of thousands of ``x``. An
        array ``x``, and a record whose derived values or length depend on the parameters, take the full
        call. Bad input raises ``ValueError`` naming the parameter, as a full call does."""
        import numpy as np

        if name not in self.param_names:
            raise ValueError(f"name: {self.id} has no parameter {name!r} (expects {', '.join(self.param_names)})")
        i = self.param_names.index(name)
        param = self.params[i]
        if param.kind not in SCALAR_KINDS:
            raise ValueError(f"name: {name} of {self.id} is a {param.kind} parameter, not a scalar")
        if name in fixed:
            raise ValueError(f"{name}: the variable of the function, not a fixed parameter")

        def full(x):
            return self(printed=printed, **{name: x}, **fixed)

        if self.derived is not None or self.length is not None or _stacked_names(self.params, fixed):
            return full
        state: dict = {}

        def f(x):
            if not state:  # the whole validation, once
                values, dims = self.validate({name: x, **fixed})
                values = detached_values(values)
                grid = self.grid_shape(values)
                if np.ndim(values[name]) > 0 or (grid and self.output != "scalar"):
                    return full(x)
                evaluate = self.evaluate is not None and not printed
                state.update(values=values, dims=dims, grid=grid, evaluate=evaluate,
                             args=None if evaluate else self.arguments(values, dims, "numpy"),
                             fn=None if evaluate else (self.printed_function if printed else self.function)("numpy"))
            else:
                value = param.validate(x, {})
                if np.ndim(value) > 0:
                    return full(x)
                state["values"][name] = value
                if self.domain is not None:
                    self.domain(state["values"], state["dims"])
                if state["args"] is not None:
                    state["args"][i] = _convert(value, "numpy")
            if state["evaluate"]:
                out = _shape_output(self.evaluate("numpy", state["values"], state["dims"]), self.output, "numpy")
            else:
                out = _shape_output(state["fn"](*state["args"]), self.output, "numpy")
            if state["grid"] and np.shape(out) != state["grid"]:
                out = np.broadcast_to(out, state["grid"]).copy()
            return out

        return f

    def _call_stack(self, kwargs: dict, stacked: list[str], backend: str, printed: bool):
        """:meth:`__call__` with stacks of matrices (numpy): ``kwargs[name]`` for each name in
        ``stacked`` is an array of shape ``(S, D, D)``, one matrix (or covariance) per item; the value
        has shape ``(S,)`` followed by the record's output shape, item ``i`` equal to the call with
        the ``i``-th matrices.

        The other parameters are validated once, the stacks at once (:func:`theory.params.validate_stack`),
        the record's ``domain`` per item. The emitted function then runs once on the whole stack
        (:func:`theory.emit.over_stacks`), and its first, middle and last items are compared with
        single evaluations (relative 1e-9); where that cannot work (a record defined by a recursion,
        a vector output, a derived value or an expression that is not stack-safe, or a mismatch) the
        items are evaluated one by one."""
        import numpy as np

        from .params import validate_stack

        if backend != "numpy":
            raise ValueError(f"{stacked[0]}: a stack of matrices (shape (S, D, D)) is evaluated by the numpy "
                             f"backend; with {backend}, give one matrix per call")
        sizes = {n: len(kwargs[n]) for n in stacked}
        first = stacked[0]
        for n in stacked[1:]:
            if sizes[n] != sizes[first]:
                raise ValueError(f"{n}: a stack of {sizes[n]} matrices does not match the {sizes[first]} of {first}")
        S = sizes[first]
        if S == 0:
            raise ValueError(f"{first}: an empty stack of matrices")
        values, dims = self.validate({**kwargs, **{n: kwargs[n][0] for n in stacked}}, backend)
        values = detached_values(values)
        if self.grid_shape(values):
            name = next(p.name for p in self.params if p.kind in SCALAR_KINDS and np.ndim(values[p.name]) > 0)
            raise ValueError(f"{name}: arrays of scalar parameters and stacks of matrices ({first}) cannot be "
                             "combined in one call")
        params = {p.name: p for p in self.params}
        stacks = {n: validate_stack(params[n], kwargs[n], dims) for n in stacked}

        def item(i):
            return {**values, **{n: stacks[n][i] for n in stacked}}

        if self.domain is not None:
            for i in range(1, S):
                try:
                    self.domain(item(i), dims)
                except ValueError as exc:
                    raise ValueError(f"{exc} (item {i} of the stack)") from None
        single = {}

        def one(i):
            if i not in single:
                single[i] = np.asarray(self._value(item(i), dims, backend, printed))
            return single[i]

        fast = self._stack_value(values, stacks, dims, printed, S, one(0).shape)
        if fast is not None:
            if all(np.allclose(fast[i], one(i), rtol=1e-9, atol=1e-300) for i in sorted({0, S // 2, S - 1})):
                return fast
            self._fns[("stack", printed)] = False  # not stack-safe: item by item from now on
        return np.stack([one(i) for i in range(S)])

    def _stack_value(self, values: dict, stacks: dict, dims: dict, printed: bool, S: int, shape: tuple):
        """The emitted function on whole stacks, shaped ``(S,) + shape``; None where it does not apply
        or fails (the caller then evaluates item by item)."""
        import numpy as np

        from .emit import over_stacks

        if self.evaluate is not None and not printed or self.output == "vector" or self.length is not None:
            return None
        key = ("stack", printed)
        if self._fns.get(key) is False:
            return None
        try:
            fn = self.printed_function("numpy") if printed else self.function("numpy")
            with np.errstate(all="ignore"):
                out = np.asarray(over_stacks(fn)(*self.arguments({**values, **stacks}, dims, "numpy")),
                                 dtype=np.float64)
            size = int(np.prod(shape))
            if out.size == S * size:
                return out.reshape((S, *shape))
            if out.size == size:  # the value does not depend on the stacked matrices
                return np.broadcast_to(out.reshape(shape), (S, *shape)).copy()
        except Exception:  # noqa: BLE001 - not stack-safe: remembered, then item by item
            pass
        self._fns[key] = False
        return None

    def grid_shape(self, values: dict) -> tuple:
        """The broadcast shape of the arrays given for scalar parameters (``()`` when none is an
        array): the shape of a numpy value, followed by ``(D, D)`` or ``(n,)`` for a matrix or
        vector record."""
        import numpy as np

        return tuple(np.broadcast_shapes(*(np.shape(values[p.name]) for p in self.params if p.kind in SCALAR_KINDS)))

    def _value(self, values: dict, dims: dict, backend: str, printed: bool):
        """The value at validated ``values`` (the emitted function, or the record's ``evaluate``)."""
        if self.evaluate is not None and not printed:
            if backend not in ("numpy", "mpmath", "torch"):
                raise ValueError(f"backend: expected numpy, mpmath or torch, got {backend!r}")
            return _shape_output(self.evaluate(backend, values, dims), self.output, backend)
        args = self.arguments(values, dims, backend)
        fn = self.printed_function(backend) if printed else self.function(backend)
        out = _shape_output(fn(*args), self.output, backend)
        if self.length is not None:
            out = out[: self.length(values, dims)]
        return out

    def _call_torch(self, values: dict, dims: dict, printed: bool):
        """:meth:`__call__` for the torch backend: tensors given as parameters stay in the autograd
        graph through the derived values (e.g. eigen-projectors by ``torch.linalg.eigh``), the
        emitted function or the record's ``evaluate``. The arithmetic runs in float64; the result
        has the dtype of the tensor parameters (torch's promotion of their dtypes: float32 inputs
        give a float32 result, with gradients in float32), float64 where none is a tensor."""
        import torch

        tensors = [v for v in values.values() if isinstance(v, torch.Tensor)]
        dtype = torch.float64
        if tensors:
            dtype = tensors[0].dtype
            for t in tensors[1:]:
                dtype = torch.promote_types(dtype, t.dtype)
        if self.evaluate is not None and not printed:
            out = _shape_output(self.evaluate("torch", values, dims), self.output, "torch")
        else:
            args = self.arguments(values, dims, "torch")
            fn = self.printed_function("torch") if printed else self.function("torch")
            out = _shape_output(fn(*args), self.output, "torch")
            if self.length is not None:
                out = out[: self.length(values, dims)]
        if not isinstance(out, torch.Tensor):
            out = torch.as_tensor(out, dtype=torch.float64)
        if tensors:
            out = out.to(device=tensors[0].device)
            graph = [t for t in tensors if t.requires_grad]
            if graph and not out.requires_grad and out.is_floating_point():
                # a value that depends on none of the tensors that require grad (e.g. h*(0) = 0 of
                # the decoder at s = 1): in the graph with zero gradient, so backward() works
                out = out + sum((0 * t.detach().sum() * t).sum() for t in graph).to(out.dtype)
        return out.to(dtype) if out.is_floating_point() else out

    def arguments(self, values: dict, dims: dict, backend: str) -> list:
        """The positional arguments of :meth:`function` for ``(values, dims)`` from
        :meth:`validate`: the parameters converted to ``backend``, the derived symbols' values,
        then ``D`` where it is not a parameter."""
        D = dims.get("D", values.get("D"))
        args = [_convert(values[n], backend) for n in self.param_names]
        if self.derived is not None:
            extra = self.derived(values, dims, backend)
            args += [_convert(extra[n], backend) for n in self.derived_names]
        if "D" not in self.param_names:
            args.append(D)
        return args

    def __repr__(self) -> str:
        return f"<ClosedForm {self.id} ({self.source}; {self.status})>"


_SIZED_KINDS = ("covariance", "matrix", "vector")


def _dimension(p, value):
    """The dimension a sized parameter's value appears to have (its last axis; a list of eigenvalues
    for a covariance, a vector's length), or None where it cannot be read (the validation then says why)."""
    if p.kind not in _SIZED_KINDS or value is None or isinstance(value, (str, bytes, dict, bool)):
        return None
    import numpy as np

    try:
        shape = np.shape(value)
    except (TypeError, ValueError):
        return None
    if p.kind == "vector" and len(shape) == 2 and 1 in shape:  # a column or a row
        return max(shape)
    return shape[-1] if shape else None


def _common_dimension(params, kwargs: dict):
    """The dimension shared by the most sized parameters (ties: the first declared), or None."""
    from collections import Counter

    dims = [d for d in (_dimension(p, kwargs[p.name]) for p in params) if d is not None]
    if not dims:
        return None
    counts = Counter(dims)
    best = max(counts.values())
    return next(d for d in dims if counts[d] == best)


def _stacked_names(params, kwargs: dict) -> list[str]:
    """The matrix and covariance parameters given as a stack of matrices (three dimensions)."""
    import numpy as np

    names = []
    for p in params:
        value = kwargs.get(p.name)
        if p.kind in ("matrix", "covariance") and value is not None and not isinstance(value, (str, bytes)):
            try:
                ndim = np.ndim(value)
            except (TypeError, ValueError):
                continue  # ragged or odd input: validate() says what is wrong with it
            if ndim == 3:
                names.append(p.name)
    return names


def _check_broadcast(params, values: dict) -> None:
    """Arrays given for scalar parameters must broadcast together (numpy rules); otherwise
    ``ValueError`` naming the parameter whose shape clashes with the ones before it."""
    import numpy as np

    seen: list[tuple[str, tuple]] = []
    for p in params:
        if p.kind not in SCALAR_KINDS:
            continue
        shape = tuple(np.shape(values[p.name]))
        if not shape:
            continue
        try:
            np.broadcast_shapes(*(s for _, s in seen), shape)
        except ValueError:
            others = ", ".join(f"{n} {s}" for n, s in seen)
            raise ValueError(f"{p.name}: an array of shape {shape} does not broadcast with "
                             f"{others} (vectorised parameters must have compatible shapes)") from None
        seen.append((p.name, shape))


def _convert(value, backend):
    """A validated parameter value as the emitted function of ``backend`` takes it.

    numpy: a scalar (an index is a Python ``int`` up to 2**53, a real a Python ``float``) becomes
    a ``numpy.float64``, so that the emitted arithmetic runs in numpy float64: kept as ``int``,
    powers such as ``T**3`` leave int64 at T = 2**22 and numpy then fails on the Python ``int``;
    kept as ``float``, ``lam**2`` at lam = 1e300 raises OverflowError and ``1/x`` at an
    underflowed x raises ZeroDivisionError, where numpy gives inf (with its RuntimeWarning)."""
    import numpy as np

    if isinstance(value, tuple):  # tuples: index sets, used via derived args
        return value
    if backend == "numpy":
        return np.float64(value) if isinstance(value, (int, float)) else value
    if backend == "mpmath":
        import mpmath

        if isinstance(value, mpmath.matrix):  # computed at the working precision (derived args)
            return value
        if isinstance(value, np.ndarray):
            if value.ndim == 2:
                return mpmath.matrix(value.tolist())
            return [mpmath.mpf(float(v)) for v in value.ravel()]
        return mpmath.mpf(value)
    if backend == "torch":
        import torch

        if isinstance(value, torch.Tensor):
            return value.to(torch.float64)
        return torch.as_tensor(np.asarray(value, dtype=np.float64))
    raise ValueError(f"backend: expected numpy, mpmath or torch, got {backend!r}")


def _shape_output(out, output, backend):
    if backend == "numpy":
        import numpy as np

        out = np.asarray(out, dtype=np.float64)
        if output == "vector":
            return out.reshape(-1)
        if output == "scalar" and out.ndim == 0:
            return float(out)
        return out
    if backend == "torch" and output == "vector":
        return out.reshape(-1)
    if backend == "mpmath" and output == "vector":
        return [out[i, 0] for i in range(out.rows)]
    return out


# -- registry -----------------------------------------------------------------------
def register(cf: ClosedForm) -> ClosedForm:
    """Add ``cf`` to the registry (ids are unique) and return it.

    Called at import time by the modules of a topic package (built in or a plug-in's); the id's
    first part must be the topic's name."""
    if cf.id in _REGISTRY:
        raise ValueError(f"id: {cf.id!r} is registered twice")
    table = cf.symbols
    for p in cf.params:
        table.check_param(p, cf.id)
    _REGISTRY[cf.id] = cf
    return cf


_LOAD_ERROR: Exception | None = None


def _load() -> None:
    """Import every topic once (:func:`theory.papers.topics`: the packages under :mod:`theory` that
    declare a ``PAPER``, then the installed plug-ins of the entry-point group
    ``attention_dynamics_theory.topics``), each with every module in it.

    A plug-in that fails to import, or registers an id outside its topic, raises
    :class:`theory.papers.PluginError` naming its entry point (again on every later call)."""
    global _LOADED, _LOAD_ERROR
    if _LOAD_ERROR is not None:
        raise _LOAD_ERROR
    if _LOADED:
        return
    _LOADED = True
    from .papers import PluginError, topics

    try:
        for topic in topics().values():
            before = set(_REGISTRY)
            if topic.entry_point is None:
                import_package(topic.package)
            else:
                try:
                    import_package(topic.package)
                except Exception as exc:
                    raise PluginError(f"{topic.describe()} failed to load: {type(exc).__name__}: {exc}") from exc
            stray = sorted(i for i in set(_REGISTRY) - before if i.split(".", 1)[0] != topic.name)
            if stray:
                raise PluginError(f"{topic.describe()} registered ids outside its topic "
                                  f"{topic.name!r}: {', '.join(stray)}")
    except Exception as exc:
        _LOAD_ERROR = exc
        raise


def get(id: str) -> ClosedForm:
    """The closed form registered as ``id``; ``ValueError`` for an unknown id."""
    _load()
    try:
        return _REGISTRY[id]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(str(id), list(_REGISTRY), n=3, cutoff=0.75)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"id: unknown closed form {id!r}{hint}") from None


def ids() -> list[str]:
    """All registered ids, sorted."""
    _load()
    return sorted(_REGISTRY)


def records() -> list[ClosedForm]:
    """All registered closed forms, sorted by id."""
    return [_REGISTRY[i] for i in ids()]
