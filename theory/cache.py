"""A cache on disk of the emitted numeric functions, so that a new process neither derives nor emits.

Deriving a record (``ClosedForm.expr``) and emitting it (:func:`theory.emit.emit`) take a second
or more per record, and a process starts with neither. The first process that emits a function
stores the Python source sympy generated for it and a description of the names it uses (a module,
an attribute of a module, such as a numeric function a topic gives a sympy function through
``_imp_``, or the backend's linear-algebra helper ``_la`` of :mod:`theory.emit`);
later processes compile that source in a namespace rebuilt from the description, without
importing sympy.

One entry per record, backend (``numpy``, ``mpmath``, ``torch``) and form (``derived``, or
``stable`` where the record has a numerically stable rewrite, for
:meth:`theory.ClosedForm.function`; ``printed`` for :meth:`theory.ClosedForm.printed_function`).
The sympy expressions themselves (:attr:`theory.ClosedForm.expr`, ``printed_expr``, ``numeric_expr``)
are kept too, pickled, one entry per record and form (:func:`load_expr`, :func:`store_expr`): deriving
every record takes about 20 s, loading them all 0.1 s, so symbolic work in a new process (the
``symbolic_printed_forms`` checks) starts from the derived forms. A derivation outside the records
that a check needs (:func:`derivation`) is kept the same way.
An entry is keyed by

* the toolkit's version (the installed distribution ``attention-dynamics-theory``),
* sympy's version (its printers write the code),
* the source of :mod:`theory.emit` (the printers and ``_la``) and of the core modules a
  derivation uses (symbols, matrices, the Gaussian engine, parameters, the registry),
* the source of every module of the package that defines the record's ``derive``, ``printed``
  and ``stable`` callables (a derivation may use helpers of other modules of its topic),

so an edit to any of them misses and derives again. Function entries are JSON files named
``<id>.<backend>.<form>.<key>.fn.json``, expressions ``<id>.sympy.<form>.<key>.expr.pickle``.

Where: ``platformdirs.user_cache_dir("attention-dynamics-theory")``, or the folder named by the
environment variable ``ATTENTION_THEORY_CACHE``; ``ATTENTION_THEORY_CACHE=off`` turns the cache
off (nothing is read or written). Several processes may use one folder at once: an entry is
written to a temporary file in the folder and moved into place with :func:`os.replace`, and a
missing, unreadable or corrupt entry is a miss (the function is emitted again and the entry
rewritten). ``python -m theory cache info`` and ``python -m theory cache clear`` show and empty
the folder (``clear`` deletes only entries and this module's temporary files). An entry is Python
code (or a pickle) that runs when it is loaded: the folder should be writable by its user only, as
the user cache folder is.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["ENV", "DISTRIBUTION", "folder", "enabled", "key", "load", "store", "load_expr", "store_expr", "derivation",
           "info", "clear"]

#: The environment variable: ``off`` turns the cache off, a path relocates it.
ENV = "ATTENTION_THEORY_CACHE"
#: The toolkit's distribution name (its version is part of every key; it names the default folder).
DISTRIBUTION = "attention-dynamics-theory"
#: Layout of an entry; bumped when the stored fields change.
FORMAT = 1
#: Values of :data:`ENV` that turn the cache off.
OFF = ("off", "0", "false", "no", "none", "disabled")
#: Core modules of :mod:`theory` whose source decides what a derivation and its emitted code are.
CORE = ("emit", "symbols", "matrices", "gaussian", "params", "registry", "papers")
#: Backends and forms an entry may hold.
BACKENDS = ("numpy", "mpmath", "torch")
FORMS = ("derived", "stable", "printed")

_SUFFIX = ".fn.json"
_EXPR_SUFFIX = ".expr.pickle"
_ENTRY = re.compile(r"^[\w.\-]+\.((numpy|mpmath|torch)\.(derived|stable|printed)\.[0-9a-f]{24}\.fn\.json"
                    r"|sympy\.(derived|stable|printed)\.[0-9a-f]{24}\.expr\.pickle)$")
_TEMP_PREFIX = ".theory-fn-tmp-"


# -- where --------------------------------------------------------------------------
def folder() -> Path | None:
    """The cache folder, or None when :data:`ENV` turns the cache off."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in OFF:
        return None
    if value:
        return Path(value).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir(DISTRIBUTION))


def enabled() -> bool:
    """Whether the cache is on (:data:`ENV` is not ``off``)."""
    return folder() is not None


# -- keys ---------------------------------------------------------------------------
def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


@cache
def toolkit_version() -> str:
    """The toolkit's version (:data:`theory.__version__`, the one place it is written)."""
    from ._version import __version__

    return __version__


@cache
def _sympy_version() -> str:
    return _version("sympy")


@cache
def _file_hash(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@cache
def _package_hash(package: str) -> str:
    """Hash of the source of every ``.py`` file in ``package`` (recursively, by relative path);
    ``""`` for a module with no folder."""
    mod = sys.modules.get(package)
    paths = list(getattr(mod, "__path__", []) or [])
    if not paths:
        file = getattr(mod, "__file__", None)
        return _file_hash(file) if file else ""
    h = hashlib.sha256()
    for root in paths:
        files = sorted(p for p in Path(root).rglob("*.py") if "__pycache__" not in p.parts)
        for p in files:
            h.update(str(p.relative_to(root)).encode())
            h.update(_file_hash(str(p)).encode())
    return h.hexdigest()


@cache
def _core_hash() -> str:
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in CORE:
        h.update(name.encode())
        h.update(_file_hash(str(here / f"{name}.py")).encode())
    return h.hexdigest()


def _defining_packages(cf) -> list[str] | None:
    """The packages whose source decides ``cf``'s forms: the package of each module defining
    ``derive``, ``printed`` or ``stable``; None when a callable's module is unknown."""
    import inspect

    packages = set()
    for fn in (cf.derive, cf.printed, cf.stable):
        if fn is None:
            continue
        fn = inspect.unwrap(getattr(fn, "func", fn))  # functools.partial: its function
        module = getattr(fn, "__module__", None)
        mod = sys.modules.get(module) if module else None
        if mod is None:
            return None
        packages.add(module if hasattr(mod, "__path__") else module.rpartition(".")[0] or module)
    return sorted(packages)


def key(cf, backend: str, form: str, *, version: str | None = None) -> str | None:
    """The key (24 hex digits) of ``cf``'s entry for ``backend`` and ``form``; None when the
    record's source cannot be found (such a record is not cached). ``version`` replaces the
    toolkit's version (tests)."""
    packages = _defining_packages(cf)
    if packages is None:
        return None
    return _digest(packages, cf.id, backend, form, version)


def _digest(packages: list[str], name: str, backend: str, form: str, version: str | None = None) -> str | None:
    """The key of an entry named ``name`` whose content the source of ``packages`` decides; None
    when a package's source cannot be read."""
    try:
        sources = {p: _package_hash(p) for p in packages}
    except OSError:
        return None
    parts = {
        "format": FORMAT,
        "toolkit": toolkit_version() if version is None else version,
        "sympy": _sympy_version(),
        "core": _core_hash(),
        "sources": sources,
        "id": name,
        "backend": backend,
        "form": form,
        "python": list(sys.version_info[:2]),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def _path(base: Path, cf, backend: str, form: str, digest: str, suffix: str = _SUFFIX) -> Path:
    safe = re.sub(r"[^\w.\-]", "_", cf.id)
    return base / f"{safe}.{backend}.{form}.{digest}{suffix}"


def _write(base: Path, path: Path, data: bytes) -> Path | None:
    """Write ``data`` to ``path`` in ``base`` atomically (a temporary file moved into place); the
    path, or None when the folder cannot be written."""
    tmp = None
    try:
        base.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix=path.suffix, dir=base)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return path
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return None


# -- the namespace of an emitted function ---------------------------------------------
#: Modules searched for an object the generated code names without a module prefix.
_CANDIDATES = ("numpy", "numpy.linalg", "scipy.special", "scipy", "mpmath", "torch", "math", "cmath", "builtins")


def _la(backend: str):
    from . import emit

    return {"numpy": emit._NumpyLA, "mpmath": emit._MpmathLA, "torch": emit._TorchLA}[backend]


def _describe(name: str, obj, backend: str) -> list | None:
    """How to rebuild the global ``name`` bound to ``obj``: ``["module", m]``, ``["attr", m, a]``,
    ``["la"]`` or ``["value", v]`` (a number); None when it cannot be rebuilt."""
    import types

    if isinstance(obj, types.ModuleType):
        return ["module", obj.__name__]
    if name == "_la":
        return ["la"] if obj is _la(backend) else None
    if type(obj) in (int, float, bool, str):
        return ["value", obj]
    owner = getattr(obj, "__module__", None)
    for m in ([owner] if isinstance(owner, str) else []) + list(_CANDIDATES):
        mod = sys.modules.get(m)
        if mod is None:
            continue
        if getattr(mod, name, None) is obj:
            return ["attr", m, name]
    # an implemented function (a sympy Function with ``_imp_``): the module-level function it calls
    qualname = getattr(obj, "__qualname__", None)
    if isinstance(owner, str) and isinstance(qualname, str) and "." not in qualname and "<" not in qualname:
        mod = sys.modules.get(owner)
        if mod is not None and getattr(mod, qualname, None) is obj:
            return ["attr", owner, qualname]
    for m in _CANDIDATES:
        mod = sys.modules.get(m)
        if mod is None:
            continue
        for attr, value in vars(mod).items():
            if value is obj and not attr.startswith("__"):
                return ["attr", m, attr]
    return None


def _dotted(node) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]`` (None for anything but names joined by dots)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _globals_spec(source: str, namespace: dict, backend: str) -> tuple[dict, list] | None:
    """The globals the generated ``source`` reads, described by :func:`_describe`, and the
    submodules it reaches through attributes (``scipy.special``, ``numpy.linalg``), to import
    before the code runs; None when a global cannot be described."""
    import builtins
    import types

    tree = ast.parse(source)
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef):
            bound.add(node.name)
    spec: dict = {}
    submodules: set = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            name = node.id
            if name in spec or name in ("builtins", "range"):
                continue
            if name not in namespace:
                if name in bound or hasattr(builtins, name):
                    continue
                return None  # a free name lambdify did not bind: leave such code uncached
            desc = _describe(name, namespace[name], backend)
            if desc is None:
                if name in bound:  # an argument or local variable shadows the global
                    continue
                return None
            spec[name] = desc
        elif isinstance(node, ast.Attribute):
            chain = _dotted(node)
            if chain is None or chain[0] not in namespace or not isinstance(namespace[chain[0]], types.ModuleType):
                continue
            obj = namespace[chain[0]]
            for part in chain[1:-1]:
                obj = getattr(obj, part, None)
                if not isinstance(obj, types.ModuleType):
                    break
                submodules.add(obj.__name__)
    return spec, sorted(submodules)


def _rebuild(spec: dict, submodules: list, backend: str) -> dict:
    import builtins
    import importlib

    for name in submodules:
        importlib.import_module(name)
    namespace: dict[str, Any] = {"builtins": builtins, "range": range}
    for name, desc in spec.items():
        kind = desc[0]
        if kind == "module":
            namespace[name] = importlib.import_module(desc[1])
        elif kind == "attr":
            namespace[name] = getattr(importlib.import_module(desc[1]), desc[2])
        elif kind == "la":
            namespace[name] = _la(backend)
        elif kind == "value":
            namespace[name] = desc[1]
        else:
            raise ValueError(f"unknown global kind {kind!r}")
    return namespace


def _compile(source: str, funcname: str, namespace: dict, label: str) -> Callable:
    """Compile ``source`` in ``namespace`` and return its function ``funcname``; the source is
    registered with :mod:`linecache` so that ``inspect.getsource`` shows it (as for lambdify)."""
    import linecache
    import weakref

    filename = f"<theory-cache {label}>"
    code = compile(source, filename, "exec")
    local: dict = {}
    exec(code, namespace, local)
    fn = local[funcname]
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    weakref.finalize(fn, linecache.cache.pop, filename, None)
    return fn


# -- load and store -------------------------------------------------------------------
def load(cf, backend: str, form: str) -> Callable | None:
    """``cf``'s function for ``backend`` and ``form`` from the cache; None on a miss (cache off,
    no entry, an entry that cannot be read, parsed or compiled)."""
    base = folder()
    if base is None or backend not in BACKENDS or form not in FORMS:
        return None
    digest = key(cf, backend, form)
    if digest is None:
        return None
    path = _path(base, cf, backend, form, digest)
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
        if entry.get("format") != FORMAT or entry.get("key") != digest or entry.get("id") != cf.id:
            return None
        namespace = _rebuild(entry["globals"], entry["submodules"], backend)
        return _compile(entry["source"], entry["funcname"], namespace, f"{cf.id} {backend} {form}")
    except Exception:  # missing, partial, corrupt or stale: recompute
        return None


def store(cf, backend: str, form: str, fn: Callable) -> Path | None:
    """Write ``fn`` (as emitted by :func:`theory.emit.emit`) to the cache; return the entry's path,
    or None when nothing was written (cache off, code that cannot be rebuilt without sympy, a
    folder that cannot be written)."""
    import linecache

    base = folder()
    if base is None or backend not in BACKENDS or form not in FORMS:
        return None
    digest = key(cf, backend, form)
    if digest is None:
        return None
    code = getattr(fn, "__code__", None)
    lines = linecache.cache.get(code.co_filename) if code is not None else None
    if not lines:
        return None
    source = "".join(lines[2])
    try:
        found = _globals_spec(source, fn.__globals__, backend)
    except SyntaxError:
        return None
    if found is None:
        return None
    spec, submodules = found
    entry = {"format": FORMAT, "key": digest, "id": cf.id, "backend": backend, "form": form,
             "funcname": code.co_name, "source": source, "globals": spec, "submodules": submodules}
    return _write(base, _path(base, cf, backend, form, digest), json.dumps(entry).encode("utf-8"))


def _read_expr(path: Path, digest: str, name: str):
    """The expression of the entry at ``path`` if it is this key's and this name's, else None
    (missing, partial, corrupt or stale: derive again)."""
    import pickle

    try:
        with open(path, "rb") as f:
            entry = pickle.load(f)
        if entry.get("format") != FORMAT or entry.get("key") != digest or entry.get("id") != name:
            return None
        return entry["expr"]
    except Exception:
        return None


def _write_expr(base: Path, path: Path, digest: str, name: str, form: str, expr) -> Path | None:
    """Write ``expr`` as the entry at ``path`` (atomically); None when nothing was written (an
    expression that cannot be pickled, a folder that cannot be written)."""
    import pickle

    try:
        data = pickle.dumps({"format": FORMAT, "key": digest, "id": name, "form": form, "expr": expr})
    except Exception:
        return None
    return _write(base, path, data)


def load_expr(cf, form: str):
    """``cf``'s sympy expression of ``form`` (``derived``, ``stable``, ``printed``) from the cache;
    None on a miss (cache off, no entry, an entry that cannot be read or is not this record's)."""
    base = folder()
    if base is None or form not in FORMS:
        return None
    digest = key(cf, "sympy", form)
    if digest is None:
        return None
    return _read_expr(_path(base, cf, "sympy", form, digest, _EXPR_SUFFIX), digest, cf.id)


def store_expr(cf, form: str, expr) -> Path | None:
    """Write ``cf``'s sympy expression of ``form`` to the cache (atomically); return the entry's
    path, or None when nothing was written (cache off, an expression that cannot be pickled, a
    folder that cannot be written)."""
    base = folder()
    if base is None or form not in FORMS or expr is None:
        return None
    digest = key(cf, "sympy", form)
    if digest is None:
        return None
    return _write_expr(base, _path(base, cf, "sympy", form, digest, _EXPR_SUFFIX), digest, cf.id, form, expr)


def derivation(name: str, package: str | Sequence[str], build: Callable[[], Any]) -> Any:
    """The sympy result of ``build()``, a derivation outside the records (such as the radical forms
    of a record that a check compares with, or the source lambdify emits for them), loaded from
    the cache or built and stored.

    ``name`` names the entry (``<topic>.<part>.<what>``, unique); ``package`` is the package of
    :mod:`theory` whose source decides the result, or a sequence of them (with the core modules,
    sympy's and the toolkit's versions, as for a record's expressions: an edit there misses and
    builds again). With the cache off, or a result that cannot be pickled, ``build()`` every time.
    A missing, corrupt or stale entry is a miss.
    """
    import importlib

    if not re.fullmatch(r"[\w.\-]+", name or ""):
        raise ValueError(f"name: expected letters, digits, '.', '_' or '-', got {name!r}")
    packages = [package] if isinstance(package, str) else list(package)
    if not packages or not all(isinstance(p, str) and p for p in packages):
        raise ValueError(f"package: expected a package name or a sequence of them, got {package!r}")
    base = folder()
    if base is None:
        return build()
    for p in packages:
        importlib.import_module(p)  # its source is part of the key
    digest = _digest(sorted(set(packages)), name, "sympy", "derived")
    if digest is None:
        return build()
    path = base / f"{name}.sympy.derived.{digest}{_EXPR_SUFFIX}"
    value = _read_expr(path, digest, name)
    if value is None:
        value = build()
        _write_expr(base, path, digest, name, "derived", value)
    return value


# -- info and clear -------------------------------------------------------------------
def _entries(base: Path) -> list[Path]:
    try:
        return sorted(p for p in base.iterdir() if _ENTRY.match(p.name) and p.is_file())
    except OSError:
        return []


def info() -> dict:
    """``{"folder", "enabled", "entries", "bytes", "toolkit_version"}``: where the cache is, whether
    it is on, how many entries it holds and their total size. With the cache off, ``folder``
    is where it would be."""
    base = folder()
    on = base is not None
    if base is None:
        import platformdirs

        where = Path(platformdirs.user_cache_dir(DISTRIBUTION))
    else:
        where = base
    entries = _entries(where)
    size = 0
    for p in entries:
        try:
            size += p.stat().st_size
        except OSError:
            pass
    return {"folder": str(where), "enabled": on, "entries": len(entries), "bytes": size,
            "toolkit_version": toolkit_version()}


def clear() -> int:
    """Delete every entry (and stale temporary files) in the cache folder; return how many
    entries were deleted. Other files in the folder are left alone."""
    base = folder()
    if base is None:
        import platformdirs

        base = Path(platformdirs.user_cache_dir(DISTRIBUTION))
    removed = 0
    for p in _entries(base):
        try:
            p.unlink()
            removed += 1
        except OSError:
            pass
    try:
        temps = [p for p in base.iterdir() if p.name.startswith(_TEMP_PREFIX) and p.name.endswith((".json", ".pickle"))]
    except OSError:
        temps = []
    for p in temps:
        try:
            p.unlink()
        except OSError:
            pass
    return removed
