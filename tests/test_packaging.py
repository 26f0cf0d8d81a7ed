"""The distribution as a user gets it: an sdist and a wheel built from the repository's tracked files with
``python -m build`` (the wheel from the sdist, so the sdist is complete), without deprecation warnings; the
wheel ships every module, ``py.typed`` and the console script, and its metadata says what ``pyproject.toml``
says; installed into a fresh virtual environment, with its dependencies from the package index, its public API
imports and it runs ``gym-remote demo``, from the installed files, not from the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

tomllib = pytest.importorskip("tomllib")  # (Python 3.11 on)

pytestmark = pytest.mark.timeout(300)


def _tracked_files() -> list[str]:
    """The repository's files as a clean clone has them (all but ignored and untracked ones)."""
    if (REPO_ROOT / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True, timeout=30
        ).stdout
        return [name for name in listed.decode().split("\0") if name and (REPO_ROOT / name).is_file()]
    return [str(path.relative_to(REPO_ROOT)) for path in REPO_ROOT.rglob("*") if path.is_file()]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path, str]:
    """The sdist, the wheel, and what building them printed."""
    source = tmp_path_factory.mktemp("source")
    for name in _tracked_files():
        if name.startswith(("gym_remote/", "LICENSE", "README.md", "pyproject.toml")):
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONWARNINGS": "default"},
    )
    printed = result.stdout + result.stderr
    assert result.returncode == 0, printed[-5000:]
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel, printed


def test_the_build_warns_of_nothing_deprecated(built):
    _, _, printed = built
    warnings = [line for line in printed.splitlines() if "deprecat" in line.lower()]
    assert not warnings, "\n".join(warnings)


def test_the_wheel_ships_every_module_the_type_marker_and_the_console_script(built):
    _, wheel, _ = built
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
        metadata_text = archive.read(metadata).decode()
        entry_points_text = archive.read(entry_points).decode()
    modules = {str(path.relative_to(REPO_ROOT)) for path in (REPO_ROOT / "gym_remote").rglob("*.py")}
    assert modules - names == set(), "modules missing from the wheel"
    assert "gym_remote/py.typed" in names
    assert not [name for name in names if name.startswith(("tests/", "benchmarks/", "examples/"))]
    assert "gym-remote = gym_remote.cli:main" in entry_points_text
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    fields = [line.split(": ", 1) for line in metadata_text.split("\n\n", 1)[0].splitlines() if ": " in line]
    assert ["License-Expression", project["license"]] in fields
    assert ["Requires-Python", project["requires-python"]] in fields
    required = {value for key, value in fields if key == "Requires-Dist" and "extra ==" not in value}
    assert {requirement.replace(" ", "") for requirement in required} == {
        _normalized(requirement) for requirement in project["dependencies"]
    }
    extras = {value for key, value in fields if key == "Provides-Extra"}
    assert extras == set(project["optional-dependencies"])


def _normalized(requirement: str) -> str:
    """A requirement as the metadata writes it (its version bounds sorted: ``<2,>=1.1``)."""
    name = requirement.split(">")[0].split("<")[0].split("=")[0]
    bounds = requirement[len(name) :]
    return name + ",".join(sorted(bounds.split(","))) if bounds else name


def test_the_sdist_holds_the_license_readme_and_every_module(built):
    sdist, _, _ = built
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    modules = {str(path.relative_to(REPO_ROOT)) for path in (REPO_ROOT / "gym_remote").rglob("*.py")}
    assert {"LICENSE", "README.md", "pyproject.toml", "gym_remote/py.typed"} <= names
    assert modules - names == set()


def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_demo(built, tmp_path):
    """``pip install WHEEL`` in a new virtual environment (its dependencies from the package index, as a user's
    would come), then the public API imports from the installed files and ``gym-remote demo`` runs."""
    _, wheel, _ = built
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["OMP_NUM_THREADS"] = "1"
    python, script = venv / "bin" / "python", venv / "bin" / "gym-remote"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    imported = subprocess.run(
        [
            str(python),
            "-c",
            f"import gym_remote; from gym_remote import {', '.join(_public_names())}; print(gym_remote.__file__)",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert Path(imported.stdout.strip()).is_relative_to(venv), imported.stdout
    demo = subprocess.run(
        [str(script), "demo", "--steps", "2000", "--num-envs", "2", "--num-clients", "1", "--no-progress"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "steps/s" in demo.stdout + demo.stderr, demo.stdout[-3000:]


def _public_names() -> list[str]:
    import gym_remote

    return list(gym_remote.__all__)


def test_the_docs_name_the_wheel_the_build_makes(built):
    """README.md and docs/CLUSTERS.md tell how to install the built wheel where there is no clone, by its name."""
    _, wheel, _ = built
    for document in ("README.md", "docs/CLUSTERS.md"):
        assert wheel.name in (REPO_ROOT / document).read_text(), f"{document} does not name {wheel.name}"
