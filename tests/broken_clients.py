"""``gym-remote`` with one deliberate flaw, for the conformance tests that a wrong client fails:
``python -m tests.broken_clients FLAW GYM_REMOTE_ARGS...``.

Flaws:

* ``floats-as-ints``: whole floats are written as JSON ints (``1.0`` as ``1``), as JavaScript's
  ``JSON.stringify`` writes them;
* ``no-heartbeats``: the client's socket runs no ZMTP heartbeats of its own;
* ``no-bye``: CLOSE is not answered with BYE;
* ``sync-autoreset-flags``: an env that raises in a step leaves every env's autoreset flag as it was before
  the step, as ``SyncVectorEnv`` does, not each env's own (PROTOCOL.md §5.6);
* ``random-seed``: the probe's ``np_random_seed`` is Gymnasium's, a random number before any seeded reset,
  not -1 (CONFORMANCE.md §1.6);
* ``secret-bom-kept``: a secret file's byte-order mark is kept as part of the secret, and any Unicode
  whitespace stripped (PROTOCOL.md §12.2);
* ``host-error-names``: a malformed command is reported with the names a C# client would reach for
  (``InvalidDataException``, ``System.IO``), not ``ProtocolError`` of ``gym_remote.errors`` (PROTOCOL.md §8);
* ``equal-keys-kept``: a ``d`` value whose keys are equal under Python's ``==`` is read as Python's dict
  would build it (the first key, the last value), not refused (PROTOCOL.md §3.1).
"""

from __future__ import annotations

import sys

import gymnasium as gym

from gym_remote import cli, client, codec, probe, security
from gym_remote.errors import ProtocolError
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


def sync_autoreset_flags() -> None:
    step = client.HostedEnvs.step

    def flags_kept_on_failure(self, actions, indexes=None, each=False):
        before = list(self.autoreset)
        try:
            return step(self, actions, indexes, each)
        except client.EnvFailure:
            self.autoreset[:] = before
            raise

    client.HostedEnvs.step = flags_kept_on_failure


def random_seed() -> None:
    probe.ProbeEnv.np_random_seed = gym.Env.np_random_seed


def secret_bom_kept() -> None:
    def read_secret_file(path):
        with open(path, encoding="utf-8") as file:
            return file.read().strip()

    security.read_secret_file = read_secret_file


def host_error_names() -> None:
    report = client.error_report

    def error_report(error):
        if isinstance(error, ProtocolError):
            return {**report(error), "type": "InvalidDataException", "module": "System.IO"}
        return report(error)

    client.error_report = error_report


def equal_keys_kept() -> None:
    def _dict(self, tree, depth):
        return {self.value(tree[i], depth): self.value(tree[i + 1], depth) for i in range(1, len(tree), 2)}

    codec._Decoder._HANDLERS["d"] = _dict


FLAWS = {
    "floats-as-ints": floats_as_ints,
    "no-heartbeats": no_heartbeats,
    "no-bye": no_bye,
    "sync-autoreset-flags": sync_autoreset_flags,
    "random-seed": random_seed,
    "secret-bom-kept": secret_bom_kept,
    "host-error-names": host_error_names,
    "equal-keys-kept": equal_keys_kept,
}

if __name__ == "__main__":
    FLAWS[sys.argv[1]]()
    sys.exit(cli.main(sys.argv[2:]))
