"""``gym-remote`` with one deliberate flaw, for the conformance tests that a wrong client fails:
``python -m tests.broken_clients FLAW GYM_REMOTE_ARGS...``.

Flaws:

* ``floats-as-ints``: whole floats are written as JSON ints (``1.0`` as ``1``), as JavaScript's
  ``JSON.stringify`` writes them;
* ``no-heartbeats``: the client's socket runs no ZMTP heartbeats of its own;
* ``no-bye``: CLOSE is not answered with BYE.
"""

from __future__ import annotations

import sys

from gym_remote import cli, client, codec
from gym_remote.links import zeromq


def floats_as_ints() -> None:
    encode = codec._Encoder.value

    def value(self, item, depth):
        if type(item) is float and item.is_integer():
            item = int(item)
        return encode(self, item, depth)

    codec._Encoder.value = value


def no_heartbeats() -> None:
    zeromq.set_heartbeats = lambda sock, liveness_timeout: None


def no_bye() -> None:
    send_last = client.EnvClient._send_last

    def _send_last(self, frames, what):
        if what != "BYE":
            send_last(self, frames, what)

    client.EnvClient._send_last = _send_last


FLAWS = {"floats-as-ints": floats_as_ints, "no-heartbeats": no_heartbeats, "no-bye": no_bye}

if __name__ == "__main__":
    FLAWS[sys.argv[1]]()
    sys.exit(cli.main(sys.argv[2:]))
