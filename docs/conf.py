"""Sphinx configuration of gym_remote's documentation site: ``sphinx-build -W docs docs/_build/html``.

The pages are MyST Markdown (the existing documents of docs/ are pages as they are); the API reference is
generated from the docstrings by autodoc (docs/api/). Nothing here reaches the network: no intersphinx.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's gym_remote, also where it is not installed

import gym_remote  # noqa: E402

project = "gym_remote"
author = "gym_remote contributors"
copyright = "gym_remote contributors, MIT license"
release = version = gym_remote.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
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
html_static_path: list[str] = []
pygments_style = "friendly"
