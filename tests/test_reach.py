"""Why a server's address does not answer (gym_remote/links/reach.py), on loopback, ipc and another host."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
import zmq

from gym_remote.links.reach import why_unreachable
from tests.helpers import free_tcp_address


def test_a_port_nothing_listens_on_is_refused():
    address = free_tcp_address()
    port = address.rsplit(":", 1)[1]
    assert why_unreachable(address).startswith(f"nothing listens on port {port} of 127.0.0.1 (connection refused")


def test_a_host_name_that_does_not_resolve_is_named():
    assert why_unreachable("tcp://no-such-host.invalid:5555").startswith(
        "cannot resolve the host name 'no-such-host.invalid'"
    )


def test_a_listener_that_is_not_a_zeromq_server_is_told_apart():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        assert why_unreachable(f"tcp://127.0.0.1:{port}").startswith(f"something listens on port {port} of 127.0.0.1")


def test_an_ipc_path_without_a_socket_and_a_stale_socket_file(tmp_path):
    missing = tmp_path / "nothing"
    assert why_unreachable(f"ipc://{missing}").startswith(f"no server socket at {missing}")
    stale = tmp_path / "stale"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(stale))  # bound but never listening: what a server that ended leaves behind
    assert why_unreachable(f"ipc://{stale}").startswith(f"no server listens on {stale}")


def test_a_live_zeromq_server_is_reachable_by_the_probe():
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    try:
        port = router.bind_to_random_port("tcp://127.0.0.1")
        assert why_unreachable(f"tcp://127.0.0.1:{port}").startswith("something listens")
    finally:
        router.close(0)
        context.term()


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("10.213.7.1", "nothing listens on port 5555 of 10.213.7.1"),  # a host that is up, without the server
        ("10.213.7.3", "10.213.7.3 "),  # an address no host has: no answer, or no route (ARP fails)
    ],
)
def test_from_another_host_an_unused_address_and_a_closed_port_are_told_apart(other_host, target, expected):
    probe = f"from gym_remote.links.reach import why_unreachable; print(why_unreachable('tcp://{target}:5555'))"
    done = subprocess.run(
        ["ip", "netns", "exec", other_host, sys.executable, "-c", probe], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    assert said.startswith(expected), said
    if target.endswith(".3"):
        assert "does not answer" in said or "cannot be reached" in said, said
