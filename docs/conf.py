"""Sphinx configuration of gym_remote's documentation site: ``sphinx-build -W docs docs/_build/html``.

The pages are MyST Markdown (the existing documents of docs/ are pages as they are); the API reference is
generated from the docstrings by autodoc (docs/api/). Nothing here reaches the network: no intersphinx.
"""

from __future__ import annotations

import sys
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's gym_remote, also where it is not installed
sys.path.insert(0, str(ROOT / "docs"))  # benchmark_tables, this site's own extension

import gym_remote  # noqa: E402

project = "gym_remote"
author = "gym_remote contributors"
copyright = "gym_remote contributors, MIT license"
release = version = gym_remote.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "benchmark_tables",  # docs/benchmark_tables.py: the results in docs/benchmarks/*.json as tables
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "benchmarks"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # "PROTOCOL.md#12-authentication-..." links work on the site as on GitHub

autodoc_member_order = "bysource"
autodoc_typehints = "description"  # long signatures read better as a parameter list
autodoc_typehints_description_target = "documented_params"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"gym_remote {release}"
html_static_path = ["_static"]
html_css_files = ["benchmarks.css"]
pygments_style = "friendly"


class RepositoryLinks(SphinxPostTransform):
    """Links to the repository's documents and folders outside docs/ (``../README.md``, ``../clients/cpp/``), which
    the pages share with GitHub's view of them, become their text: the site has no page for them. (MyST itself
    makes a link to another file outside docs/ a download.) A link to a path that does not exist is left for
    MyST to report, which fails a -W build."""

    default_priority = 8  # before MyST resolves its references (9)

    def run(self, **kwargs: object) -> None:
        source = Path(self.env.doc2path(self.env.docname)).parent
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst":
                continue
            if node.get("refdomain") == "doc":  # a Markdown file: its target is the path without ".md"
                path = Path(node["reftarget"] + ".md")
            else:
                path = (source / node["reftarget"].partition("#")[0]).resolve()
            if path.exists() and path.is_relative_to(ROOT) and not path.is_relative_to(ROOT / "docs"):
                text = node[0].deepcopy() if len(node) and node[0].astext() else nodes.literal("", node["reftarget"])
                node.replace_self(text)


def setup(app):
    app.add_post_transform(RepositoryLinks)
