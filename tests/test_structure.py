"""The package's structure, read from its source: what may import what, and who may touch whose internals.

* the import graph of ``gym_remote`` (subpackages and imports inside functions included) has no cycles;
* the socket-free cores (membership, episodes, commands, batch, codec, protocol, errors, the probe env,
  the conformance runner's reference values and report) import neither ZeroMQ nor a module that does
  I/O, so they run and are tested without a network;
* nothing outside the link layer (``gym_remote/links/``) calls a socket: the server, the client and the rest
  speak the protocol over links (only the conformance suite's scripted peers, made for tests, hold sockets
  of their own), and ZeroMQ is used elsewhere only for key material;
* the adapters (``sb3.py``, ``ray.py``) use only RemoteVectorEnv's public API;
* nothing assigns onto the server from outside (no callbacks wired in after construction).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

PACKAGE = Path(__file__).resolve().parent.parent / "gym_remote"
SOURCES = {
    ".".join(path.relative_to(PACKAGE).with_suffix("").parts): path for path in sorted(PACKAGE.rglob("*.py"))
}  # module name ("conformance.runner", "conformance.__init__") -> its file
MODULES = sorted(SOURCES)
SOCKET_FREE = ["membership", "episodes", "commands", "batch", "codec", "protocol", "errors", "probe"]
SOCKET_FREE += ["conformance.reference", "conformance.report"]  # the conformance runner's pure pieces
LINK_LAYER = sorted(module for module in MODULES if module.startswith("links."))
IO_MODULES = {"server", "client", "launch", "vector_env", "partial", "cli", "bench", *LINK_LAYER}
TEST_PEERS = {"conformance.scripted", "conformance.relay", "conformance.subject"}  # sockets of their own, for tests
SOCKET_MODULES = {"socket", "select", "selectors"}
ZMQ_KEY_MATERIAL = {"curve_keypair", "curve_public", "auth", "utils", "utils.z85"}  # zmq.X that are not sockets


def tree_of(module: str) -> ast.Module:
    path = SOURCES[module]
    return ast.parse(path.read_text(), filename=str(path.relative_to(PACKAGE)))


def module_of(dotted: str) -> str | None:
    """The name in SOURCES of module ``dotted`` (``gym_remote.conformance`` is ``conformance.__init__``),
    None if it is none of ``gym_remote``'s."""
    if dotted.split(".")[0] != "gym_remote":
        return None
    name = dotted.removeprefix("gym_remote").removeprefix(".")
    package = f"{name}.__init__" if name else "__init__"
    return name if name in SOURCES else package if package in SOURCES else None


def imports_of(module: str) -> tuple[set[str], set[str]]:
    """The modules of ``gym_remote`` (named as in SOURCES), and the other top-level packages, that
    ``module`` imports at run time, inside its functions too (``TYPE_CHECKING`` blocks left out).

    ``from P import a`` imports module ``P.a`` if there is one, else ``P``. That importing ``P.a`` runs
    ``P/__init__.py`` first is left out: a package's ``__init__`` may import its own modules.
    """
    package = ".".join(["gym_remote", *module.split(".")[:-1]])  # what relative imports start from
    own: set[str] = set()
    others: set[str] = set()
    for statement in tree_of(module).body:
        if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.dump(statement.test):
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.ImportFrom):
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                names = [f"{base}.{alias.name}" if module_of(f"{base}.{alias.name}") else base for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] == "gym_remote":
                    own.add(module_of(name) or name)
                else:
                    others.add(name.split(".")[0])
    return own, others


def test_the_import_graph_reads_subpackages_and_imports_inside_functions():
    assert "conformance.runner" in imports_of("cli")[0]  # cli imports it inside a function
    assert {"codec", "protocol", "conformance.scripted"} <= imports_of("conformance.wire")[0]
    assert "__init__" in imports_of("cli")[0]  # from gym_remote import __version__


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


def zmq_uses(module: str) -> set[str]:
    """What ``module`` uses of ZeroMQ: the ``zmq.X`` attributes it reads and the ``zmq`` modules it imports from."""
    used: set[str] = set()
    for node in ast.walk(tree_of(module)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "zmq":
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "zmq":
            used.update(f"{node.module.removeprefix('zmq.')}.{alias.name}".strip(".") for alias in node.names)
        elif isinstance(node, ast.Import):
            used.update(alias.name.removeprefix("zmq.") for alias in node.names if alias.name.startswith("zmq."))
    return used


@pytest.mark.parametrize(
    "module", [module for module in MODULES if module not in LINK_LAYER and module not in TEST_PEERS]
)
def test_nothing_outside_the_link_layer_calls_a_socket(module):
    _, others = imports_of(module)
    assert not others & SOCKET_MODULES, f"{module}.py imports {sorted(others & SOCKET_MODULES)}"
    assert zmq_uses(module) <= ZMQ_KEY_MATERIAL, f"{module}.py uses zmq's {sorted(zmq_uses(module) - ZMQ_KEY_MATERIAL)}"


def test_the_socket_check_reads_what_it_should():
    assert "links.zeromq" in LINK_LAYER and "links.channel" in LINK_LAYER and "server" not in LINK_LAYER
    assert {"Context", "ROUTER", "DEALER"} <= zmq_uses("links.zeromq")
    assert zmq_uses("security") <= ZMQ_KEY_MATERIAL and "curve_keypair" in zmq_uses("security")
    assert "select" in imports_of("links.mux")[1]


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
