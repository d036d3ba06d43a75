"""``.. hook-reference::``: one section per registered hook, from the registry at build time.

The data is ``up_trainer.hooks.describe.hook_records()``, which ``up hooks`` prints too, so a new
hook appears here without a doc edit. Docstrings are plain text: they are shown as paragraphs,
with ````name```` and ```name``` as inline code, never parsed as reStructuredText (a stray ``*``
in a docstring cannot break the build). Where a hand-written page has a ``.. _hook-<name>:``
label, the entry links to it.
"""
import re

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform

_CODE = re.compile(r"``(.+?)``|`([^`]+?)`")


def _inline(text):
    """Text nodes with ``x`` / `x` spans as literals."""
    out, pos = [], 0
    for m in _CODE.finditer(text):
        if m.start() > pos:
            out.append(nodes.Text(text[pos:m.start()]))
        out.append(nodes.literal(text=m.group(1) or m.group(2)))
        pos = m.end()
    if pos < len(text):
        out.append(nodes.Text(text[pos:]))
    return out


def _paragraphs(doc):
    for block in re.split(r"\n\s*\n", doc.strip()):
        if block.strip():
            yield nodes.paragraph("", "", *_inline(" ".join(line.strip() for line in block.splitlines())))


class hook_guide(nodes.General, nodes.Element):
    """Placeholder for 'Described in: <link>'; resolved once every page's labels are known."""


def _kwargs_table(kwargs):
    table = nodes.table(classes=["hook-kwargs"])
    group = nodes.tgroup(cols=2)
    table += group
    group += nodes.colspec(colwidth=1)
    group += nodes.colspec(colwidth=1)
    head = nodes.thead()
    group += head
    row = nodes.row()
    for text in ("kwarg", "default"):
        row += nodes.entry("", nodes.paragraph(text=text))
    head += row
    body = nodes.tbody()
    group += body
    for name, default in kwargs:
        row = nodes.row()
        row += nodes.entry("", nodes.paragraph("", "", nodes.literal(text=name)))
        row += nodes.entry("", nodes.paragraph("", "", nodes.literal(text=default)))
        body += row
    return table


class HookReference(Directive):
    has_content = False

    def run(self):
        from up_trainer.hooks.describe import hook_records

        self.state.document.settings.env.note_reread()  # the registry, not this file, is the source
        sections = []
        for rec in hook_records():
            if not rec.module.startswith("up_trainer."):
                continue  # a plugin installed beside the package is not part of its reference
            section = nodes.section(ids=[f"hook-reference-{rec.name}"], names=[f"hook reference {rec.name}"])
            section += nodes.title("", "", nodes.literal(text=rec.name))
            section += nodes.paragraph("", "", nodes.Text(f"Priority {rec.priority}; {rec.repeat}. Module "),
                                       nodes.literal(text=rec.module), nodes.Text("."))
            section.extend(_paragraphs(rec.doc or "(no description)"))
            section += _kwargs_table(rec.kwargs) if rec.kwargs else nodes.paragraph(text="No kwargs.")
            section += hook_guide(hook=rec.name)
            sections.append(section)
        return sections


class ResolveHookGuides(SphinxPostTransform):
    """Link each entry to its hand-written section when there is one; drop the placeholder
    otherwise. Runs before Sphinx resolves references, so the link is an ordinary :ref:."""
    default_priority = 5

    def run(self, **kwargs):
        labels = self.env.get_domain("std").labels
        for node in list(self.document.findall(hook_guide)):
            target = f"hook-{node['hook']}"
            if target not in labels:
                node.parent.remove(node)
                continue
            docname = labels[target][0]
            page = self.env.titles[docname].astext() if docname in self.env.titles else labels[target][2]
            ref = addnodes.pending_xref("", nodes.inline(text=page), refdomain="std",
                                        reftype="ref", reftarget=target, refexplicit=True, refwarn=True,
                                        refdoc=self.env.docname)
            node.replace_self(nodes.paragraph("", "", nodes.Text("Described in: "), ref, nodes.Text(".")))


def setup(app):
    app.add_node(hook_guide)
    app.add_directive("hook-reference", HookReference)
    app.add_post_transform(ResolveHookGuides)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
