"""What differs between the Gymnasium versions this package supports (``gymnasium>=1.1,<2``), in one place.

A ``RemoteVectorEnv`` raises what the installed Gymnasium's ``SyncVectorEnv`` raises for the same mistake.
Before Gymnasium 1.4, ``SyncVectorEnv`` checked its arguments with ``assert``; since 1.4 it raises
``TypeError``, ``ValueError`` or ``RuntimeError`` with slightly different messages.
"""

from __future__ import annotations

import re

import gymnasium as gym

_MAJOR, _MINOR = (int(part) for part in re.findall(r"\d+", gym.__version__)[:2])
GYMNASIUM_VERSION = (_MAJOR, _MINOR)
CHECKS_BY_ASSERT = GYMNASIUM_VERSION < (1, 4)
"""Whether ``SyncVectorEnv`` checks its arguments with ``assert`` (Gymnasium before 1.4)."""

SPACES_ERROR: type[Exception] = AssertionError if CHECKS_BY_ASSERT else RuntimeError
"""What ``SyncVectorEnv`` raises for an env whose spaces do not fit the vector's."""

RESET_MASK_NAME = "`options['reset_mask': mask]`" if CHECKS_BY_ASSERT else "`options['reset_mask']`"


def argument_error(error_type: type[Exception], message: str) -> Exception:
    """The error ``SyncVectorEnv`` raises for a bad argument: ``error_type`` since Gymnasium 1.4, an
    ``AssertionError`` before."""
    return AssertionError(message) if CHECKS_BY_ASSERT else error_type(message)
