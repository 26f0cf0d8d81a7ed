"""The documentation site (docs/, Sphinx + MyST + furo) builds with warnings as errors, its API reference
has every public name, the Python examples marked runnable run, and the command lines it shows exist.

A page marks a fenced Python block runnable with the line ``<!-- runnable -->`` just above it (an HTML
comment: invisible on the site and on GitHub). A page's runnable blocks run in order, as one script in a
fresh interpreter, like a reader pasting them one after another.

The build and the examples are processes of their own, all CPU-bound: they start together when the module's
first test needs any of them (the examples a CPU's worth at a time), and each test waits for its own.
"""

from __future__ import annotations

import ast
import json
import os
import posixpath
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from sphinx.util.inventory import InventoryFile  # the docs extra, which the test extra pulls in

from tests.conftest import REPO_ROOT, subprocess_env

DOCS = REPO_ROOT / "docs"

PUBLIC_MODULES = [
    "gym_remote",
    "gym_remote.sb3",
    "gym_remote.ray",
    "gym_remote.rllib",
    "gym_remote.registration",
    "gym_remote.security",
    "gym_remote.fleet",
    "gym_remote.metrics",
    "gym_remote.launch",
    "gym_remote.probe",
    "gym_remote.conformance",
]
"""The modules whose ``__all__`` the API reference documents, name by name."""


def public_names(module: str) -> list[str]:
    """The module's ``__all__``, read from its source (importing them all would cost seconds: ray, torch)."""
    relative = Path(*module.split("."))
    path = (
        REPO_ROOT / relative / "__init__.py"
        if (REPO_ROOT / relative).is_dir()
        else (REPO_ROOT / relative).with_suffix(".py")
    )
    for statement in ast.parse(path.read_text()).body:
        if isinstance(statement, ast.Assign) and any(
            getattr(target, "id", "") == "__all__" for target in statement.targets
        ):
            return list(ast.literal_eval(statement.value))
    raise AssertionError(f"{path} has no __all__")


RUNNABLE = re.compile(r"^<!-- runnable -->\n```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def pages() -> list[Path]:
    return sorted(path for path in DOCS.rglob("*.md") if "_build" not in path.parts)


def runnable_blocks(page: Path) -> list[str]:
    return RUNNABLE.findall(page.read_text())


RUNNABLE_PAGES = [page for page in pages() if runnable_blocks(page)]


EXAMPLE_TIMEOUT = 75
"""Seconds a page's examples may take, from the start of their process."""


class Examples:
    """The runnable examples of some pages, each page's as one script in a fresh interpreter of its own, at most
    ``workers`` at once; every process is in a session of its own, and ended with it (what the example started,
    its clients, included)."""

    def __init__(self, pages: list[Path], directory: Path, workers: int) -> None:
        self._processes: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="docs-example")
        self.runs: dict[Path, Future[tuple[int | None, str]]] = {
            page: self._executor.submit(self._run, page, directory / "-".join(page.relative_to(DOCS).parts))
            for page in pages
        }

    def _run(self, page: Path, directory: Path) -> tuple[int | None, str]:
        directory.mkdir()
        script = directory / "example.py"
        script.write_text("\n\n".join(runnable_blocks(page)))
        with self._lock:  # none starts once close() began
            if self._closed:
                raise RuntimeError("the examples were closed before this one started")
            process = subprocess.Popen(
                [sys.executable, str(script)],
                cwd=directory,
                env={**subprocess_env(), "OMP_NUM_THREADS": "1"},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            self._processes.append(process)
        try:
            output, _ = process.communicate(timeout=EXAMPLE_TIMEOUT)
        finally:
            _end_session(process)
        return process.returncode, output

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
        for process in self._processes:
            _end_session(process)
        self._executor.shutdown(wait=True)


def _end_session(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def examples(request, tmp_path_factory) -> Iterator[Examples]:
    """The examples of the pages whose test is selected, started at once (in the background)."""
    selected = [
        item.callspec.params["page"]
        for item in request.session.items
        if getattr(item, "module", None) is request.module and item.originalname == test_runnable_examples_run.__name__
    ]
    runs = Examples(selected, tmp_path_factory.mktemp("examples"), workers=os.cpu_count() or 1)
    yield runs
    runs.close()


@pytest.fixture(scope="module")
def site(examples, tmp_path_factory) -> Path:
    """The site, built once (as CI builds it: ``sphinx-build -W --keep-going``), while the examples run."""
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)],
        capture_output=True,
        text=True,
        timeout=100,
        env=subprocess_env(),
        cwd=REPO_ROOT,
    )
    assert build.returncode == 0, f"sphinx-build -W failed:\n{build.stdout}\n{build.stderr}"
    assert build.stderr.strip() == "", build.stderr  # -q: only warnings would print here
    return out


@pytest.mark.timeout(150)
def test_api_reference_documents_every_public_name(site):
    with open(site / "objects.inv", "rb") as inventory:
        documented = {
            name
            for domain, objects in InventoryFile.load(inventory, "", posixpath.join).items()
            if domain.startswith("py:")
            for name in objects
        }
    missing = [
        f"{module}.{name}"
        for module in PUBLIC_MODULES
        for name in public_names(module)
        if f"{module}.{name}" not in documented
    ]
    assert missing == [], f"public names without an entry in the API reference (docs/api/): {missing}"
    assert (site / "api" / "gym_remote.html").read_text().count("RemoteVectorEnv") > 10


def test_site_pages_have_the_landing_drop_in_and_every_tutorial(site):
    landing = (site / "index.html").read_text()
    assert "SyncVectorEnv" in landing and "RemoteVectorEnv" in landing
    for page in pages():
        html = site / page.relative_to(DOCS).with_suffix(".html")
        assert html.is_file(), f"{page.relative_to(REPO_ROOT)} has no page on the site"
        # Markdown the parser did not take would show its marks as text
        assert "```" not in html.read_text(), f"an unrendered code fence on {html.name}"


def test_benchmark_page_shows_every_recorded_median(site):
    page = (DOCS / "benchmarks.md").read_text()
    html = (site / "benchmarks.html").read_text()
    assert ":::" not in html, "an unrendered table directive on benchmarks.html"
    reports = re.findall(r"^```\{benchmark-cases\} (\S+)$", page, re.MULTILINE)
    assert reports, "docs/benchmarks.md shows no benchmark run"
    for report in reports:
        for case in json.loads((DOCS / report).read_text())["cases"]:
            shown = {label: f">{median:,.0f}<" for label, median in case["medians"].items() if median >= 100}
            missing = [label for label, cell in shown.items() if cell not in html]
            assert missing == [], f"{report}, case {case['name']}: no cell for the medians of {missing}"


# its own run, and at most one more run ahead of it in the queue
@pytest.mark.timeout(2 * EXAMPLE_TIMEOUT + 30)
@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=lambda page: str(page.relative_to(DOCS)))
def test_runnable_examples_run(page, examples):
    returncode, output = examples.runs[page].result()
    assert returncode == 0, f"the runnable examples of {page.name} failed:\n{output}"


def test_the_pages_mark_examples_runnable():
    assert len(RUNNABLE_PAGES) >= 6, [page.name for page in RUNNABLE_PAGES]
    for page in RUNNABLE_PAGES:
        for block in runnable_blocks(page):
            compile(block, str(page), "exec")


CODE_COLUMNS = 84
"""The widest code line the site's pages show without scrolling (furo, a 1280-pixel window)."""


def test_code_on_the_landing_page_and_tutorials_fits_the_page():
    for page in [DOCS / "index.md", *sorted((DOCS / "tutorials").glob("*.md"))]:
        for _, block in FENCE.findall(page.read_text()):
            wide = [line for line in block.splitlines() if len(line) > CODE_COLUMNS]
            assert wide == [], f"{page.relative_to(REPO_ROOT)}: code lines wider than {CODE_COLUMNS} columns"


def _command_lines(text: str) -> list[list[str]]:
    """The ``gym-remote ...`` commands of a page's shell blocks, as argument lists."""
    commands = []
    for language, block in FENCE.findall(text):
        if language not in ("bash", "sh", "console", ""):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip().removeprefix("$ ")
            if line.startswith("gym-remote "):
                words = shlex.split(line.replace("&", " "))
                commands.append(words[1 : words.index("--")] if "--" in words else words[1:])
    return commands


def test_command_lines_on_the_pages_use_options_that_exist():
    from gym_remote.cli import build_parser

    parser = build_parser()
    subcommands = next(action for action in parser._actions if action.dest == "command").choices
    global_options = set(parser._option_string_actions)
    checked = 0
    for page in pages():
        for words in _command_lines(page.read_text()):
            where = f"{page.relative_to(REPO_ROOT)}: gym-remote {' '.join(words)}"
            assert words[0] in subcommands, f"no subcommand {words[0]!r} ({where})"
            known = global_options | set(subcommands[words[0]]._option_string_actions)
            unknown = [word for word in words[1:] if word.startswith("--") and word.split("=")[0] not in known]
            assert unknown == [], f"no option {unknown} ({where})"
            checked += 1
    assert checked >= 10
