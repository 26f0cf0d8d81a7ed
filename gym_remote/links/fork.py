"""A process forked without exec holds none of the links' sockets.

After ``os.fork()`` the child has a copy of every descriptor of its parent: the learner's data
channels and listener, and the connections libzmq's I/O thread owns (the thread itself is not
copied). Close-on-exec does not help a child that does not exec (a ``multiprocessing`` worker, a
data loader). If the child kept them, the learner's death would go unnoticed: its clients would get
no end-of-file, and the listener's name would stay bound for as long as the child lives.

So in every forked child, :func:`_forget_in_child` closes those descriptors:

* the sockets of the link objects that registered themselves (:func:`register`), each of which
  forgets its descriptors without any I/O;
* every other socket whose local or peer address is one of the endpoints registered with
  :func:`register_address` (the sockets libzmq made for a bound or connected endpoint), found in
  ``/proc/self/fd``.
"""

from __future__ import annotations

import os
import socket
import weakref
from typing import Any, Protocol

__all__ = ["register", "register_address", "unregister_address"]


class _Forgettable(Protocol):
    def forget_in_child(self) -> None:
        """Close this object's sockets in a forked child, with no I/O on them."""


_objects: weakref.WeakSet[Any] = weakref.WeakSet()
_addresses: dict[Any, int] = {}  # socket address -> how many registrations hold it


def register(owner: _Forgettable) -> None:
    """Have ``owner.forget_in_child()`` called in every process forked from now on (while it lives)."""
    _objects.add(owner)


def register_address(address: Any) -> None:
    """Close, in forked children, every socket whose local or peer address is ``address`` (as
    ``getsockname``/``getpeername`` give it: a ``(host, port)`` tuple, a path, or an abstract name)."""
    _addresses[address] = _addresses.get(address, 0) + 1


def unregister_address(address: Any) -> None:
    count = _addresses.get(address, 0) - 1
    if count > 0:
        _addresses[address] = count
    else:
        _addresses.pop(address, None)


def _forget_in_child() -> None:
    for owner in list(_objects):
        try:
            owner.forget_in_child()
        except Exception:  # a child must come up whatever one object does
            pass
    if _addresses:
        _close_sockets_of(set(_addresses))


def _close_sockets_of(addresses: set[Any]) -> None:
    try:
        descriptors = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # not Linux: the objects above are all that can be closed
        return
    for fd in descriptors:
        try:
            probe = socket.socket(fileno=os.dup(fd))
        except OSError:  # not a socket, or the listing's own descriptor, already gone
            continue
        try:
            local, peer = _address_or_none(probe.getsockname), _address_or_none(probe.getpeername)
        finally:
            probe.close()
        if _matches(local, addresses, local_end=True) or _matches(peer, addresses, local_end=False):
            try:
                os.close(fd)
            except OSError:
                pass


def _matches(end: Any, addresses: set[Any], *, local_end: bool) -> bool:
    """Whether a socket's ``end`` is a registered address; an IP address compares by (host, port), and a
    socket accepted by a listener bound to a wildcard host has the listener's port at its local end."""
    if isinstance(end, tuple):
        host, port = end[0], end[1]
        if (host, port) in addresses:
            return True
        return local_end and (("0.0.0.0", port) in addresses or ("::", port) in addresses)
    return bool(end) and end in addresses


def _address_or_none(get: Any) -> Any:
    try:
        return get()
    except OSError:
        return None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
