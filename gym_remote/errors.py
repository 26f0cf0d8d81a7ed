"""Exceptions raised by gym_remote.

Every exception derives from :class:`GymRemoteError` and from the built-in exception a caller would
naturally catch (``TypeError`` for values that cannot travel, ``TimeoutError`` for waits that ran out,
``ConnectionError`` for peers that refuse or vanish), so existing ``except`` clauses keep working.
"""

from __future__ import annotations

import multiprocessing

__all__ = [
    "GymRemoteError",
    "EncodeError",
    "ProtocolError",
    "RemoteEnvError",
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

    Attributes:
        slot: the vector slot whose environment raised (``None`` if the error is not tied to one slot).
        remote_type: the name of the exception class raised in the client.
        remote_traceback: the traceback text formatted in the client.
    """

    def __init__(
        self, message: str, *, slot: int | None = None, remote_type: str = "", remote_traceback: str = ""
    ) -> None:
        super().__init__(message)
        self.slot = slot
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        text = super().__str__()
        if self.remote_traceback:
            text += "\n\nRemote traceback:\n" + self.remote_traceback.rstrip()
        return text


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
