"""Where a server can be reached, and why its address does not answer.

A server bound to every interface (``tcp://0.0.0.0:5555``) is reached at its host's addresses:
:func:`host_addresses` lists them, :func:`reachable_endpoints` turns a bound endpoint into the endpoints a
client may use (the first is the one to advertise).

libzmq retries a connection in its I/O thread and says nothing about why it fails, so a wrong port, a
machine that is down and a host name that does not resolve all look the same from the socket. A plain
connection attempt tells them apart: :func:`why_unreachable` makes one and says, in words, what it found.

>>> why_unreachable("tcp://no-such-host.invalid:5555").startswith("cannot resolve the host name")
True
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import sys
from urllib.parse import urlsplit

__all__ = ["why_unreachable", "host_addresses", "reachable_endpoints"]

_WILDCARDS = ("tcp://0.0.0.0:", "tcp://*:", "tcp://[::]:")
_LOOPBACK = "127.0.0.1"


def host_addresses() -> list[str]:
    """This host's IPv4 addresses (in this network namespace): the default route's interface first, then the
    other interfaces in their order, loopback last. Only loopback where the interfaces cannot be listed."""
    found: list[str] = []
    if sys.platform.startswith("linux"):
        import fcntl

        default = _default_route_interface()
        names = [name for _, name in socket.if_nameindex()]
        names.sort(key=lambda name: name != default)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            for name in names:
                try:  # SIOCGIFADDR: the interface's IPv4 address
                    packed = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
                except OSError:
                    continue  # no IPv4 address, or down
                address = socket.inet_ntoa(packed[20:24])
                if not address.startswith("127.") and address not in found:
                    found.append(address)
    return [*found, _LOOPBACK]


def reachable_endpoints(bound: str) -> list[str]:
    """The endpoints a client may connect to for a server bound to ``bound``, the one to advertise first: for a
    wildcard bind, one per address of this host (:func:`host_addresses`); else ``bound`` itself."""
    for wildcard in _WILDCARDS:
        if bound.startswith(wildcard):
            port = bound[len(wildcard) :]
            return [f"tcp://{address}:{port}" for address in host_addresses()]
    return [bound]


def _default_route_interface() -> str:
    try:
        with open("/proc/net/route", encoding="ascii") as routes:
            for line in list(routes)[1:]:
                fields = line.split()
                if len(fields) > 1 and fields[1] == "00000000":
                    return fields[0]
    except OSError:
        pass
    return ""


PROBE_SECONDS = 2.0
"""How long a probe waits for a TCP connection to be accepted or refused."""


def why_unreachable(address: str, timeout: float = PROBE_SECONDS) -> str:
    """What a plain connection to the ZeroMQ endpoint ``address`` finds, in words ("" for other transports).

    For ``tcp://``: the host name does not resolve, nothing listens on the port (refused), the host cannot
    be reached (no route), or it does not answer within ``timeout`` (down, or a firewall drops packets); or
    something listens there. For ``ipc://``: no socket file, or a file no server listens on.
    """
    scheme, _, rest = address.partition("://")
    if scheme == "tcp":
        return _why_tcp(rest, timeout)
    if scheme == "ipc":
        return _why_ipc(rest)
    return ""


def _why_tcp(rest: str, timeout: float) -> str:
    parts = urlsplit(f"//{rest}")
    host, port = parts.hostname or "", parts.port
    if not host or port is None:
        return ""
    try:
        candidates = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        return f"cannot resolve the host name {host!r} ({error.strerror})"
    found = ""
    for family, kind, proto, _, target in candidates:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.settimeout(timeout)
                probe.connect(target)
            return (
                f"something listens on port {port} of {host}, but it did not answer the ZeroMQ handshake "
                "(is it a gym_remote server?)"
            )
        except TimeoutError:
            found = (
                f"{host} does not answer (no reply within {timeout:g} s: is the machine up, and does a firewall "
                f"let port {port} through?)"
            )
        except ConnectionRefusedError:
            return (
                f"nothing listens on port {port} of {host} (connection refused: is the port right, and the server "
                "running?)"
            )
        except OSError as error:
            if error.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL):
                found = f"{host} cannot be reached from this machine ({error.strerror}: is the address right?)"
            else:
                found = f"connecting to {host}:{port} failed ({error.strerror or error})"
    return found


def _why_ipc(path: str) -> str:
    if path.startswith("@"):  # Linux's abstract namespace: no file to look for
        return ""
    if not os.path.exists(path):
        return f"no server socket at {path} (is the path right, and the server running?)"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(PROBE_SECONDS)
            probe.connect(path)
    except ConnectionRefusedError:
        return f"no server listens on {path} (a server that ended may have left it behind)"
    except OSError as error:
        return f"connecting to {path} failed ({error.strerror or error})"
    return f"something listens on {path}, but it did not answer the ZeroMQ handshake (is it a gym_remote server?)"
