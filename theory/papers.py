"""The papers the toolkit covers, keyed by topic (the first part of a closed-form id).

A topic is a package that declares its paper once, in its ``__init__.py``::

    from theory import Paper

    PAPER = Paper(authors=("Saxe", "McClelland", "Ganguli"), year=2014,
                  title="Exact solutions to the nonlinear dynamics of learning in deep linear neural networks",
                  venue="ICLR 2014", arxiv="1312.6120")

The topics are discovered, never listed:

* built in: every subpackage ``theory.<topic>`` whose ``__init__`` defines ``PAPER``; the topic
  is the package's name;
* installed plug-ins: every entry point of the group :data:`TOPICS_GROUP`
  (``attention_dynamics_theory.topics``); the entry point's name is the topic, its value the
  topic package (``my_topic = "my_package.my_topic"``), whose ``__init__`` defines ``PAPER``.

Discovery imports only the topic packages' ``__init__`` modules (no sympy); the registry
(:func:`theory.registry.get`) then imports every module of every topic package.

:data:`PAPERS` (topic -> :class:`Paper`, built-in topics by name, then plug-ins by name) is
built on first use; it is used by the documentation pages, the errata page and the report.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

__all__ = ["Paper", "Topic", "PAPERS", "TOPICS_GROUP", "CHECKS_GROUP", "PluginError", "paper_of", "bibtex",
           "symbols_of", "topics"]

#: Entry-point group through which an installed package adds a topic: each entry point's name is
#: the topic (the first part of its closed-form ids), its value the topic package.
TOPICS_GROUP = "attention_dynamics_theory.topics"
#: Entry-point group through which an installed package adds checks: each entry point's value is a
#: module or package whose import (every submodule, recursively) registers checks
#: (``verify.check``). Read by :mod:`verify.checks`; named here so that both groups live together.
CHECKS_GROUP = "attention_dynamics_theory.checks"


class PluginError(ImportError):
    """An installed plug-in (an entry point of :data:`TOPICS_GROUP` or :data:`CHECKS_GROUP`) that
    fails to load; the message names the entry point, its value and the distribution."""


@dataclass(frozen=True)
class Paper:
    """A paper, as a topic package declares it (``PAPER = Paper(...)`` in its ``__init__``).

    Attributes
    ----------
    authors : tuple of str
        The authors' surnames, in the paper's order (a list is accepted).
    year : int
        Year of the version the topic follows.
    title : str
        The title.
    venue : str
        Where it appeared, e.g. ``ICML 2025``.
    arxiv : str or None
        arXiv identifier (``1312.6120``), where known.
    doi : str or None
        DOI, where known.
    url : str or None
        Another stable address (e.g. the OpenReview page), where known.
    names : tuple of str
        The authors' full names as BibTeX writes them (``"Zhang, Yedi"``), in the paper's order;
        empty: the surnames alone.
    booktitle : str or None
        The proceedings, for BibTeX (``Proceedings of the 42nd International Conference on Machine
        Learning``); None: an ``@article`` with :attr:`venue` as its journal.
    topic : str
        The topic (id prefix); filled in by discovery, not by the declaration.
    """

    authors: tuple[str, ...]
    year: int
    title: str
    venue: str
    arxiv: str | None = None
    doi: str | None = None
    url: str | None = None
    names: tuple[str, ...] = ()
    booktitle: str | None = None
    topic: str = field(default="", compare=False)

    def __post_init__(self):
        if isinstance(self.authors, str):
            raise ValueError("authors: expected a sequence of surnames, got a string")
        object.__setattr__(self, "authors", tuple(self.authors))
        if not self.authors or not all(isinstance(a, str) and a.strip() for a in self.authors):
            raise ValueError("authors: expected at least one non-empty surname")
        if not isinstance(self.year, int) or isinstance(self.year, bool):
            raise ValueError(f"year: expected an integer, got {self.year!r}")
        if isinstance(self.names, str):
            raise ValueError("names: expected a sequence of full names, got a string")
        object.__setattr__(self, "names", tuple(self.names))
        if self.names and len(self.names) != len(self.authors):
            raise ValueError(f"names: expected one full name per author ({len(self.authors)}), got {len(self.names)}")

    @property
    def cite(self) -> str:
        """The short citation, e.g. ``Zhang, Singh, Latham, Saxe 2025``."""
        return f"{', '.join(self.authors)} {self.year}"

    @property
    def link(self) -> str | None:
        """A URL for the paper: arXiv, else DOI, else :attr:`url`; None when none is known."""
        if self.arxiv:
            return f"https://arxiv.org/abs/{self.arxiv}"
        if self.doi:
            return f"https://doi.org/{self.doi}"
        return self.url

    @property
    def key(self) -> str:
        """A BibTeX key: first author's surname, year, first word of the title (``zhang2025training``)."""
        import re

        word = next((w for w in re.findall(r"[A-Za-z]+", self.title) if w.lower() not in _STOP), "paper")
        surname = re.sub(r"[^a-z]", "", self.authors[0].lower())
        return f"{surname}{self.year}{word.lower()}"

    def bibtex(self) -> str:
        """The paper's BibTeX entry (``@inproceedings`` when :attr:`booktitle` is known, else
        ``@article``), with its arXiv identifier, DOI and URL where known."""
        fields = [("title", "{" + self.title + "}"),
                  ("author", " and ".join(self.names or self.authors)),
                  ("booktitle", self.booktitle) if self.booktitle else ("journal", self.venue),
                  ("year", str(self.year))]
        if self.doi:
            fields.append(("doi", self.doi))
        if self.arxiv:
            fields += [("eprint", self.arxiv), ("archiveprefix", "arXiv")]
        if self.link:
            fields.append(("url", self.link))
        kind = "inproceedings" if self.booktitle else "article"
        body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields)
        return f"@{kind}{{{self.key},\n{body}\n}}"

    def __str__(self) -> str:
        return self.cite


#: Words a BibTeX key skips when it takes the title's first word.
_STOP = frozenset({"a", "an", "the", "on", "of", "and"})


@dataclass(frozen=True)
class Topic:
    """A discovered topic: its name, its package, its paper, and the entry point that declared it
    (None for a built-in topic)."""

    name: str
    package: str
    paper: Paper
    entry_point: object | None = None

    def describe(self) -> str:
        """How the topic was found, for error messages."""
        if self.entry_point is None:
            return f"built-in topic {self.name!r} ({self.package})"
        return describe_entry_point(self.entry_point, TOPICS_GROUP)


def describe_entry_point(ep, group: str) -> str:
    """``plug-in 'name' = 'value' (entry point group G, distribution D)``."""
    dist = getattr(getattr(ep, "dist", None), "name", None)
    where = f"entry point group {group}" + (f", distribution {dist}" if dist else "")
    return f"plug-in {ep.name!r} = {ep.value!r} ({where})"


def entry_points(group: str) -> list:
    """The installed entry points of ``group``, sorted by name (one per name: the first found)."""
    from importlib.metadata import entry_points as _eps

    seen: dict[str, object] = {}
    for ep in sorted(_eps(group=group), key=lambda e: (e.name, e.value)):
        seen.setdefault(ep.name, ep)
    return list(seen.values())


def _builtin_topics() -> list[Topic]:
    import pkgutil

    from . import __path__ as root

    out = []
    for info in sorted(pkgutil.iter_modules(root), key=lambda m: m.name):
        if not info.ispkg:
            continue
        package = f"{__package__}.{info.name}"
        paper = getattr(importlib.import_module(package), "PAPER", None)
        if paper is None:
            continue  # a helper package, not a topic
        if not isinstance(paper, Paper):
            raise TypeError(f"{package}.PAPER: expected a theory.Paper, got {type(paper).__name__}")
        out.append(Topic(info.name, package, replace(paper, topic=info.name)))
    return out


def _plugin_topic(ep) -> Topic:
    try:
        package = ep.value.split(":", 1)[0].strip()
        module = importlib.import_module(package)
        paper = getattr(module, "PAPER", None)
        if not isinstance(paper, Paper):
            raise TypeError(f"{package} must define PAPER = theory.Paper(...), "
                            f"found {type(paper).__name__}")
        if not ep.name.isidentifier():
            raise ValueError(f"the entry point's name {ep.name!r} (the topic) must be an identifier")
    except Exception as exc:
        raise PluginError(f"{describe_entry_point(ep, TOPICS_GROUP)} failed to load: "
                          f"{type(exc).__name__}: {exc}") from exc
    return Topic(ep.name, package, replace(paper, topic=ep.name), ep)


_TOPICS: dict[str, Topic] | None = None


def topics() -> dict[str, Topic]:
    """Every topic, built-in ones (by name) then installed plug-ins (by name); discovered once.

    ``PluginError`` names a plug-in that fails to import, declares no ``PAPER``, or takes the
    name of a topic already there."""
    global _TOPICS
    if _TOPICS is None:
        found = {t.name: t for t in _builtin_topics()}
        for ep in entry_points(TOPICS_GROUP):
            if ep.name in found:
                raise PluginError(f"{describe_entry_point(ep, TOPICS_GROUP)}: topic {ep.name!r} is "
                                  f"already {found[ep.name].describe()}")
            found[ep.name] = _plugin_topic(ep)
        _TOPICS = found
    return _TOPICS


class _Papers(Mapping):
    """topic -> :class:`Paper`, discovered on first access (see :func:`topics`)."""

    def __getitem__(self, topic: str) -> Paper:
        return topics()[topic].paper

    def __iter__(self) -> Iterator[str]:
        return iter(topics())

    def __len__(self) -> int:
        return len(topics())

    def __repr__(self) -> str:
        return f"PAPERS({', '.join(topics())})"


#: topic -> :class:`Paper` for every discovered topic (built on first access).
PAPERS: Mapping[str, Paper] = _Papers()


def paper_of(id: str) -> Paper:
    """The paper of closed form or check ``id`` (by its first dotted part)."""
    topic = id.split(".", 1)[0]
    try:
        return PAPERS[topic]
    except KeyError:
        raise ValueError(f"id: no paper registered for topic {topic!r}") from None


def bibtex(id: str) -> str:
    """The BibTeX entry of the paper that closed form, check or topic ``id`` comes from.

    >>> print(bibtex("linear_attention.merged.sigma").splitlines()[0])
    @inproceedings{zhang2025training,
    """
    return paper_of(id).bibtex()


def symbols_of(topic: str):
    """The symbol table (:class:`theory.symbols.Symbols`) a topic declares as ``SYMBOLS`` in its
    package ``__init__``; :data:`theory.symbols.DEFAULT` (every name a positive real) for a topic
    that declares none or is not discovered. ``TypeError`` when ``SYMBOLS`` is something else."""
    from .symbols import DEFAULT, Symbols

    t = topics().get(topic)
    if t is None:
        return DEFAULT
    table = getattr(importlib.import_module(t.package), "SYMBOLS", None)
    if table is None:
        return DEFAULT
    if not isinstance(table, Symbols):
        raise TypeError(f"{t.package}.SYMBOLS: expected a theory.Symbols, got {type(table).__name__}")
    return table
