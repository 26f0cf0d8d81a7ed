"""Static types: pyright (the version pinned in the ``test`` extra, its settings in pyproject.toml's
``[tool.pyright]``) finds no error in ``gym_remote/``, and a user's script type-checked against the package sees
:class:`~gym_remote.RemoteVectorEnv` as a class and every public name of ``gym_remote.__all__`` with a known
type (the package ships ``py.typed``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pyright  # noqa: F401 (installed by the test extra: a missing pyright fails here, never skips)
import pytest

import gym_remote
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.timeout(300)  # a first run may install its Node.js wheel's files; later ones take seconds


def _pyright(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """pyright's CLI (the PyPI package's wrapper, Node.js from the ``pyright[nodejs]`` wheel), with this
    interpreter's environment to resolve imports."""
    env = dict(os.environ)
    env["PYRIGHT_PYTHON_IGNORE_WARNINGS"] = "1"  # no look-up of newer pyright versions on PyPI
    return subprocess.run(
        [sys.executable, "-m", "pyright", "--pythonpath", sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_pyright_finds_no_error_in_the_package():
    """As CI runs it: ``pyright`` in the repository, which reads ``[tool.pyright]`` (include gym_remote)."""
    done = _pyright(cwd=REPO_ROOT)
    assert done.returncode == 0, f"pyright reports errors in gym_remote/:\n{done.stdout}{done.stderr}"
    assert "0 errors" in done.stdout, done.stdout


def _installed_copy(site: Path) -> None:
    """``site`` as an environment's site-packages holding the package as a wheel installs it (its modules and
    ``py.typed``), with the packages it needs from this environment (a ``.pth`` file, which pyright follows)."""
    site.mkdir(parents=True)
    shutil.copytree(
        REPO_ROOT / "gym_remote",
        site / "gym_remote",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")


def test_a_users_script_sees_the_public_names_with_their_types(tmp_path):
    """A script importing every name of ``gym_remote.__all__``, checked by pyright against the package installed
    in a virtual environment: each name resolves to a known type (RemoteVectorEnv to the class itself), and a
    misuse of the API is an error pyright names."""
    assert (REPO_ROOT / "gym_remote" / "py.typed").exists()
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    _installed_copy(tmp_path / "venv" / "lib" / version / "site-packages")
    names = list(gym_remote.__all__)
    script = tmp_path / "user.py"
    script.write_text(
        "import gymnasium as gym\n"
        f"from gym_remote import {', '.join(names)}\n"
        + "".join(f"reveal_type({name})\n" for name in names)
        + "envs = RemoteVectorEnv([lambda: gym.make('CartPole-v1')], num_clients=1)\n"
        "reveal_type(envs.step)\n"
        "envs.reset(seed='not a seed')\n"  # the one error the script makes
    )
    (tmp_path / "pyrightconfig.json").write_text(
        json.dumps({"venvPath": str(tmp_path), "venv": "venv", "pythonVersion": "3.11", "include": ["user.py"]})
    )
    done = _pyright("--outputjson", cwd=tmp_path)
    report = json.loads(done.stdout)
    diagnostics = report["generalDiagnostics"]
    revealed = {
        entry["range"]["start"]["line"]: entry["message"]
        for entry in diagnostics
        if entry["severity"] == "information" and entry["message"].startswith("Type of ")
    }
    errors = [entry for entry in diagnostics if entry["severity"] == "error"]
    where = "\n".join(f"{entry['range']['start']['line'] + 1}: {entry['message']}" for entry in diagnostics)
    assert len(revealed) == len(names) + 1, where
    for line, name in enumerate(names, start=2):
        message = revealed.get(line, "")
        assert "Unknown" not in message and '"Any"' not in message, f"{name}: {message}"
    assert revealed[2] == 'Type of "RemoteVectorEnv" is "type[RemoteVectorEnv]"', revealed[2]
    assert "ndarray" in revealed[len(names) + 3], revealed[len(names) + 3]  # step's declared return type
    assert [entry["range"]["start"]["line"] for entry in errors] == [len(names) + 4], where
    assert "seed" in errors[0]["message"], where
