"""The package's structure, read from its source: what may import what, and who may touch whose internals.

* the import graph of ``gym_remote`` has no cycles;
* the socket-free cores (membership, episodes, commands, batch, codec, protocol, errors, the probe env,
  the conformance runner's reference values and report) import neither ZeroMQ nor a module that does
  I/O, so they run and are tested without a network;
* the adapters (``sb3.py``, ``ray.py``) use only RemoteVectorEnv's public API;
* nothing assigns onto the server from outside (no callbacks wired in after construction).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

PACKAGE = Path(__file__).resolve().parent.parent / "gym_remote"
MODULES = sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem not in ("__init__", "__main__"))
SOCKET_FREE = ["membership", "episodes", "commands", "batch", "codec", "protocol", "errors", "probe"]
SOCKET_FREE += ["conformance/reference", "conformance/report"]  # the conformance runner's pure pieces
IO_MODULES = {"server", "transport", "client", "launch", "security", "vector_env", "partial", "cli", "bench"}


def tree_of(module: str) -> ast.Module:
    return ast.parse((PACKAGE / f"{module}.py").read_text(), filename=f"{module}.py")


def imports_of(module: str) -> tuple[set[str], set[str]]:
    """The modules of ``gym_remote``, and the other top-level packages, that ``module`` imports at run
    time (``TYPE_CHECKING`` blocks left out)."""
    own: set[str] = set()
    others: set[str] = set()
    for statement in tree_of(module).body:
        if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.dump(statement.test):
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] if node.module != "gym_remote" else [f"gym_remote.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] == "gym_remote":
                    own.add(parts[1])
                else:
                    others.add(parts[0])
    return own, others


def test_the_import_graph_has_no_cycles():
    graph = {module: imports_of(module)[0] & set(MODULES) for module in MODULES}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:
        if module in done:
            return
        assert module not in visiting, f"import cycle: {' -> '.join([*visiting[visiting.index(module) :], module])}"
        visiting.append(module)
        for imported in sorted(graph[module]):
            visit(imported)
        visiting.pop()
        done.add(module)

    for module in MODULES:
        visit(module)


@pytest.mark.parametrize("module", SOCKET_FREE)
def test_socket_free_cores_import_no_sockets(module):
    own, others = imports_of(module)
    assert not others & {"zmq", "socket", "selectors"}, f"{module}.py imports {sorted(others)}"
    assert not own & IO_MODULES, f"{module}.py imports the I/O modules {sorted(own & IO_MODULES)}"


def private_names_of_remote_vector_env() -> set[str]:
    """The ``_names`` RemoteVectorEnv defines: its private methods and the attributes it assigns."""
    names: set[str] = set()
    for node in ast.walk(tree_of("vector_env")):
        if isinstance(node, ast.ClassDef) and node.name == "RemoteVectorEnv":
            for item in ast.walk(node):
                if isinstance(item, ast.FunctionDef) and item.name.startswith("_") and not item.name.startswith("__"):
                    names.add(item.name)
                if isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) and item.value.id == "self":
                    if item.attr.startswith("_") and not item.attr.startswith("__"):
                        names.add(item.attr)
    return names


def reaches_into(node: ast.AST, private: set[str]) -> bool:
    """Whether ``node`` reads a private name of RemoteVectorEnv on a RemoteVectorEnv: ``x.envs._name``
    (the SB3 adapter's vector env) or ``self._name`` in a subclass of RemoteVectorEnv."""
    return isinstance(node, ast.Attribute) and node.attr in private


def subclass_bodies(tree: ast.Module) -> list[ast.ClassDef]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and any(getattr(base, "id", "") == "RemoteVectorEnv" for base in node.bases)
    ]


@pytest.mark.parametrize("adapter", ["sb3", "ray"])
def test_adapters_use_only_the_public_api_of_remote_vector_env(adapter):
    private = private_names_of_remote_vector_env()
    assert "_launcher" in private and "_call_clients" in private  # the reading works
    tree = tree_of(adapter)
    on_envs = [
        node
        for node in ast.walk(tree)
        if reaches_into(node, private) and isinstance(node.value, ast.Attribute) and node.value.attr == "envs"
    ]
    in_subclasses = [
        node
        for body in subclass_bodies(tree)
        for node in ast.walk(body)
        if reaches_into(node, private) and isinstance(node.value, ast.Name) and node.value.id == "self"
    ]
    used = sorted(f"line {node.lineno}: .{node.attr}" for node in on_envs + in_subclasses)
    assert not used, f"{adapter}.py reaches into RemoteVectorEnv: {used}"


def test_nothing_assigns_onto_the_server_from_outside():
    offenders = []
    for module in MODULES:
        if module == "server":
            continue
        for node in ast.walk(tree_of(module)):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign)
                else []
            )
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute):
                    if target.value.attr in ("_server", "server"):
                        offenders.append(f"{module}.py line {node.lineno}: .{target.value.attr}.{target.attr} = ...")
    assert not offenders, offenders
