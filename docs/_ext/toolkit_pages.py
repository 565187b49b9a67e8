"""Sphinx extension: pages generated from the closed-form and check registries.

At ``builder-inited`` it writes, under ``docs/_generated/`` (not committed):

* ``papers/<topic>.md``: one page per paper, every registered closed form with its id,
  source equation, status, parameters, the derived formula in LaTeX (from ``expr``), the
  paper's printed formula where it differs (erratum), and the checks that cover it;
* ``checks.md``: every check with its method, title and the closed forms it covers;
* ``full_profile.md``: the archived full-profile runs (:mod:`verify.archive`);
* ``api/*.md``: one autodoc page per module of ``theory`` and ``verify``.

Files are rewritten only when their text changes, so incremental builds stay incremental.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

PACKAGES = ("theory", "verify")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _latex(record, form: str = "derived") -> str:
    return record.latex(form, mat_delim="(")


def _param_line(p) -> str:
    return f"- `{p.name}`: {p.describe().split(': ', 1)[1]}"


def paper_page(topic: str) -> str:
    """The Markdown page of one paper."""
    import theory
    from theory.papers import PAPERS
    from verify.registry import all_checks as checks

    paper = PAPERS[topic]
    covering: dict[str, list] = {}
    for chk in checks():
        for id in chk.covers:
            covering.setdefault(id, []).append(chk)
    records = [r for r in theory.records() if r.id.split(".", 1)[0] == topic]
    links = ([f"[arXiv:{paper.arxiv}](https://arxiv.org/abs/{paper.arxiv})"] if paper.arxiv else []) + (
        [f"[doi:{paper.doi}](https://doi.org/{paper.doi})"] if paper.doi else []) + (
        [f"[{paper.venue} page]({paper.url})"] if paper.url else [])
    where = paper.venue + (f" ({', '.join(links)})" if links else "")
    out = [f"# {paper.cite}: {paper.title}", "",
           f"*{where}.* {len(records)} closed forms are registered for this paper; each one is "
           "derived in sympy by the toolkit and covered by the checks listed with it "
           "(`python -m verify <check id>` reruns one).", "",
           f"Cite the paper (`python -m theory cite {topic}`):", "", "```bibtex", paper.bibtex(), "```", ""]
    out += ledger_section(topic)
    out += ["## Closed forms", ""]
    if not records:
        out += ["No closed form of this paper is registered yet.", ""]
    for r in records:
        out += [f"### `{r.id}`", "", f"{r.title}.", "",
                f"**Source:** {r.source}. **Status:** {r.status}."
                + (" **Erratum.**" if r.erratum else ""), ""]
        out += ["**Parameters:**", ""] + [_param_line(p) for p in r.params] + [""]
        out += ["**Derived:**", "", "$$", _latex(r), "$$", ""]
        if r.printed is not None:
            if r.erratum:
                out += ["**As printed in the paper (differs):**", "", "$$", _latex(r, "printed"), "$$", "",
                        f"**Erratum:** {r.erratum}", ""]
            elif r.printed_origin == "worked":
                out += ["The paper prints no formula for this; a form worked out from its statement is proved equal "
                        "to the derivation (`symbolic_printed_forms`).", ""]
            else:
                out += ["The paper's printed form is proved equal to the derivation "
                        "(`symbolic_printed_forms`).", ""]
        if r.doc:
            out += [r.doc, ""]
        chks = covering.get(r.id, [])
        out += ["**Checked by:** " + (", ".join(f"`{c.id}` ({c.method})" for c in chks) or "none"), ""]
    return "\n".join(out)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "/")


def _shown(path, root) -> str:
    """``path`` relative to the repository root where it is inside it, else its last three parts."""
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return "/".join(path.parts[-3:])


def ledger_section(topic: str) -> list[str]:
    """The paper's coverage ledger (:mod:`verify.ledger`) as a section: counts per status, then
    every numbered item with its status, closed forms, checks and note."""
    from verify.ledger import ROOT, STATUSES, ledger_path, load

    path = ledger_path(topic)
    if not path.is_file():
        return []
    led = load(topic)
    c = led.counts()
    out = ["## Every numbered item of the paper", "",
           f"The coverage ledger (`{_shown(path, ROOT)}`) lists {len(led.items)} items: "
           + ", ".join(f"{c[s]} {s}" for s in STATUSES) + ". *verified*: a check confirms the result; "
           "*erratum*: the printed form is wrong and a check decides for the corrected one; *refuted*: a check "
           "shows the claim fails; *missing*: not covered yet.", "",
           "| item | status | closed forms | checks | note |", "|---|---|---|---|---|"]
    for it in led.items:
        cfs = ", ".join(f"`{i.split('.', 1)[1]}`" for i in it.closed_forms)
        chks = ", ".join(f"`{i.split('.', 1)[1]}`" for i in it.checks)
        out.append(f"| {_cell(it.ref)} | {it.status} | {cfs} | {chks} | {_cell(it.note)} |")
    return out + [""]


def checks_page() -> str:
    """The Markdown page listing every check."""
    from verify.registry import all_checks as checks

    out = ["# Checks", "",
           "Every check of `python -m verify all`: its method and the closed forms it covers. A check "
           "passes only when its discrepancy is within tolerance *and* each of its negative controls "
           "is rejected.", "",
           "| check | method | title | covers |", "|---|---|---|---|"]
    for c in checks():
        covers = ", ".join(f"`{i}`" for i in c.covers) if len(c.covers) <= 4 else f"{len(c.covers)} closed forms"
        out.append(f"| `{c.id}` | {c.method} | {c.title.replace('|', '/')} | {covers} |")
    return "\n".join(out) + "\n"


def modules() -> list[str]:
    """Every importable module of the two packages, sorted."""
    names = []
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        names.append(pkg)
        for info in pkgutil.walk_packages(mod.__path__, prefix=f"{pkg}."):
            if info.name.endswith("__main__"):
                continue
            names.append(info.name)
    return sorted(names)


def api_page(module: str) -> str:
    """One module's page; a package page shows its docstring only (its names live in submodules)."""
    is_package = hasattr(importlib.import_module(module), "__path__")
    opts = "\n   :no-members:" if is_package else ""
    return f"# `{module}`\n\n```{{eval-rst}}\n.. automodule:: {module}{opts}\n```\n"


def generate(srcdir: Path) -> None:
    from theory.papers import PAPERS

    out = srcdir / "_generated"
    for topic in PAPERS:
        _write(out / "papers" / f"{topic}.md", paper_page(topic))
    _write(out / "checks.md", checks_page())
    from verify.archive import page as full_profile_page

    _write(out / "full_profile.md", full_profile_page())
    mods = modules()
    for m in mods:
        _write(out / "api" / f"{m}.md", api_page(m))
    for stale in (out / "api").glob("*.md"):  # a module renamed or removed since the last build
        if stale.stem not in mods and stale.name != "index.md":
            stale.unlink()
    index = ["# API reference", "", "```{toctree}", ":maxdepth: 1", ""] + [m for m in mods] + ["```", ""]
    _write(out / "api" / "index.md", "\n".join(index))


def _on_builder_inited(app) -> None:
    generate(Path(app.srcdir))


#: Module-docstring sections written as aligned two-column tables (rendered as literal blocks).
_TABLES = ("Contains", "Contents", "Modules", "Commands")
_UNDERLINE = re.compile(r"^\s*([-=~^])\1{2,}\s*$")


def plain_text_docstring(lines: list[str]) -> None:
    """Make the toolkit's plain-text docstrings valid reStructuredText, in place.

    The docstrings write math as text: ``|x|`` is an absolute value, not an rST substitution,
    so every ``|`` is escaped; a module docstring's underlined headings (``Contains``,
    ``References``, ...) become rubrics, since sections cannot nest inside autodoc output.
    """
    i = 0
    while i < len(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if lines[i].strip() and _UNDERLINE.match(nxt) and len(nxt.strip()) >= len(lines[i].strip()):
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            title = lines[i].strip()
            lines[i: i + 2] = [f"{indent}.. rubric:: {title}", ""]
            if title in _TABLES:  # an aligned "name   description" table: keep it as typed
                j = i + 2
                while j < len(lines) and not lines[j].strip():
                    j += 1
                k = j
                while k < len(lines) and lines[k].strip():
                    k += 1
                lines[j:k] = [f"{indent}::", ""] + [f"{indent}    {x[len(indent):]}" for x in lines[j:k]]
        i += 1
    for k, line in enumerate(lines):
        if "|" in line:
            parts = line.split("``")  # odd parts are inline literals: left as they are
            lines[k] = "``".join(re.sub(r"(?<!\\)\|", r"\\|", p) if j % 2 == 0 else p
                                 for j, p in enumerate(parts))


def _on_docstring(app, what, name, obj, options, lines) -> None:
    plain_text_docstring(lines)


#: A call that creates a pyplot figure, in a notebook's code.
_FIGURE_CALL = re.compile(r"\bplt\.(?:subplots|figure|subplot_mosaic)\(")


def figures_drawn(source: str) -> int:
    """How many figures a jupytext percent notebook draws: its pyplot calls that create one
    (``plt.subplots``, ``plt.figure``, ``plt.subplot_mosaic``), comments and markdown aside.
    Each is meant to be drawn once and shown once (``plt.show()`` at the end of its cell)."""
    return sum(len(_FIGURE_CALL.findall(line)) for line in source.splitlines()
               if not line.lstrip().startswith("#"))


def _on_doctree_resolved(app, doctree, docname: str) -> None:
    """A notebook page must show every figure its notebook draws, as an image."""
    from docutils import nodes
    from sphinx.util import logging

    path = Path(app.srcdir) / f"{docname}.py"
    if not docname.startswith("notebooks/") or not path.is_file():
        return
    drawn = figures_drawn(path.read_text(encoding="utf-8"))
    shown = len(list(doctree.findall(nodes.image)))
    if shown < drawn:
        logging.getLogger(__name__).warning(
            "%s draws %d figures but its page shows %d images (a figure shown as text "
            "'<Figure size ...>', or closed without plt.show()?)", docname, drawn, shown,
            location=docname)


def setup(app):
    app.connect("builder-inited", _on_builder_inited)
    app.connect("doctree-resolved", _on_doctree_resolved)
    app.connect("autodoc-process-docstring", _on_docstring, priority=900)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
