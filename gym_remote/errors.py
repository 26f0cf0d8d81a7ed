"""Exceptions raised by gym_remote.

Every exception derives from :class:`GymRemoteError` and from the built-in exception a caller would
naturally catch (``TypeError`` for values that cannot travel, ``TimeoutError`` for waits that ran out,
``ConnectionError`` for peers that refuse or vanish), so existing ``except`` clauses keep working.
"""

from __future__ import annotations

import builtins
import multiprocessing
from collections.abc import Mapping
from typing import Any

import gymnasium.error

__all__ = [
    "GymRemoteError",
    "EncodeError",
    "ProtocolError",
    "RemoteEnvError",
    "remote_env_error",
    "JoinRefusedError",
    "ClientLostError",
    "RemoteTimeoutError",
]


class GymRemoteError(Exception):
    """Base class of every error raised by gym_remote."""


class EncodeError(GymRemoteError, TypeError):
    """A value cannot be put on the wire without pickle; the message names the value and its place.

    Attributes:
        reason: why the value cannot travel.
        path: where it sits in what was sent, outermost first, as ``(key, text)`` pairs: the key or
            index itself, and how it reads in the message (``"['stats']"``, ``"[1]"``).
    """

    def __init__(self, message: str, *, reason: str = "", path: tuple[tuple[object, str], ...] = ()) -> None:
        super().__init__(message)
        self.reason = reason or message
        self.path = path


class ProtocolError(GymRemoteError, ValueError):
    """A peer sent bytes that do not follow ``docs/PROTOCOL.md`` (malformed, truncated or unexpected)."""


class RemoteEnvError(GymRemoteError, RuntimeError):
    """An environment raised inside a client.

    Raised as a subclass that also derives from the class the env raised, when that class is a
    built-in exception or one of ``gymnasium.error``'s (see :func:`remote_env_error`): an env's
    ``ValueError`` is caught by ``except ValueError`` on the learner, as with ``SyncVectorEnv``.

    Attributes:
        slot: the vector slot whose environment raised (``None`` if the error is not tied to one slot).
        remote_type: the name of the exception class raised in the client.
        remote_module: the module of that class (``"builtins"`` for built-in exceptions).
        remote_traceback: the traceback text formatted in the client.
    """

    def __init__(
        self,
        message: str,
        *,
        slot: int | None = None,
        remote_type: str = "",
        remote_traceback: str = "",
        remote_module: str = "",
    ) -> None:
        Exception.__init__(self, message)  # not the remote class's __init__, whose arguments may differ
        self.slot = slot
        self.remote_type = remote_type
        self.remote_module = remote_module
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        text = str(self.args[0]) if self.args else ""  # not KeyError's quoting
        if self.remote_traceback:
            text += "\n\nRemote traceback:\n" + self.remote_traceback.rstrip()
        return text

    def __reduce__(self) -> tuple[Any, ...]:  # the subclasses are made at run time: rebuild by description
        message = self.args[0] if self.args else ""
        return (_make, (message, self.slot, self.remote_type, self.remote_module, self.remote_traceback))


_TYPED_ERROR_MODULES = {"builtins": builtins, "gymnasium.error": gymnasium.error}
"""Where a remote exception class may be looked up by name: nothing is imported, nothing runs."""


_typed_classes: dict[type[Exception], type[RemoteEnvError]] = {}
"""The subclasses made so far, by remote class: at most one per exception class of those modules
(keyed by class, not by the names peers send, so a peer cannot grow it)."""


def remote_error_class(module: str, name: str) -> type[RemoteEnvError]:
    """The :class:`RemoteEnvError` subclass for a remote exception class ``module.name``.

    A subclass of both ``RemoteEnvError`` and that class, when it is a built-in exception or one of
    ``gymnasium.error``'s; ``RemoteEnvError`` itself for any other class.
    """
    namespace = _TYPED_ERROR_MODULES.get(module)
    kind = getattr(namespace, name, None) if namespace is not None else None
    if not (isinstance(kind, type) and issubclass(kind, Exception)) or issubclass(RemoteEnvError, kind):
        return RemoteEnvError  # not an exception class there, or one RemoteEnvError is already (RuntimeError)
    typed = _typed_classes.get(kind)
    if typed is None:
        try:
            typed = type(f"Remote{kind.__name__}", (RemoteEnvError, kind), {"__module__": __name__})
        except TypeError:  # an incompatible instance layout
            typed = RemoteEnvError
        _typed_classes[kind] = typed
    return typed


def remote_env_error(message: str, report: Mapping[str, Any], slot: int | None = None) -> RemoteEnvError:
    """The error to raise for a client's ERROR ``report`` (``docs/PROTOCOL.md`` §8): a
    :class:`RemoteEnvError` that is also of the remote exception's class where that can be had."""
    return _make(
        message, slot, str(report.get("type", "")), str(report.get("module", "")), str(report.get("traceback", ""))
    )


def _make(message: str, slot: int | None, remote_type: str, remote_module: str, traceback: str) -> RemoteEnvError:
    fields = {"slot": slot, "remote_type": remote_type, "remote_module": remote_module, "remote_traceback": traceback}
    try:
        return remote_error_class(remote_module, remote_type)(message, **fields)
    except Exception:  # the class refuses to be made this way
        return RemoteEnvError(message, **fields)


class JoinRefusedError(GymRemoteError, ConnectionError):
    """The server refused a client's handshake (protocol version, spaces, no free slot ...).

    Attributes:
        code: a short machine-readable reason (``"version"``, ``"spaces"``, ``"full"``, ``"invalid"``).
    """

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class ClientLostError(GymRemoteError, ConnectionError):
    """A client that served slots went away (its process exited or it left) while it was needed."""


class RemoteTimeoutError(GymRemoteError, TimeoutError, multiprocessing.TimeoutError):
    """A wait on remote peers ran out of time; the message says what was waited for.

    Also a ``multiprocessing.TimeoutError``, which ``AsyncVectorEnv.step_wait`` raises, so code written
    for it catches this too.
    """
