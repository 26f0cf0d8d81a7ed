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
* ``seeds-mod-2-64``: the probe takes a reset's seed modulo 2**64, as a client holding seeds in a uint64 would
  (CONFORMANCE.md §1.3: seeds have no upper bound);
* ``secret-bom-kept``: a secret file's byte-order mark is kept as part of the secret, and any Unicode
  whitespace stripped (PROTOCOL.md §12.2);
* ``host-error-names``: a malformed command is reported with the names a C# client would reach for
  (``InvalidDataException``, ``System.IO``), not ``ProtocolError`` of ``gym_remote.errors`` (PROTOCOL.md §8);
* ``equal-keys-kept``: a ``d`` value whose keys are equal under Python's ``==`` is read as Python's dict
  would build it (the first key, the last value), not refused (PROTOCOL.md §3.1).
* ``value-actions-of-env-0``: a STEP with FLAG_VALUE steps every env with the first env's action;
* ``any-version``: a command of another protocol version is taken for one of this version;
* ``strict-flags``: a message with a flag bit the protocol does not define is refused as malformed;
* ``unpickles``: tag ``p`` is read (unpickled) outside the trusted mode;
* ``flat-object-arrays``: tag ``o`` arrays are read without their shape;
* ``own-spaces``: the array layouts follow the client's own env's spaces, not WELCOME's;
* ``set-attr-ignores-subset``: SET_ATTR with FLAG_SUBSET sets envs 0, 1, ... instead of the index frame's;
* ``hello-once``: a HELLO that gets no answer is never said again;
* ``no-rejoin``: a client that loses its server exits instead of joining it again;
* ``zap-at-once``: after a ZAP status 500 the client connects again at once;
* ``each-ignored``: a STEP with FLAG_EACH is handled as one without it: the first env that raises gets the
  command an ERROR, and the other envs lose their results (PROTOCOL.md §5.6);
* ``counts-anew``: a DISCONNECTED sets the count of failed handshakes in a row back to 0, so a client with a wrong
  secret never reaches three and never stops (PROTOCOL.md §11.1);
* ``each-errors-dropped``: a STEP with FLAG_EACH is answered with a RESULT that leaves out ``errors``, as if no
  env had raised (PROTOCOL.md §5.6);
* ``has-attr-calls``: the has_attr query calls the attribute when it is callable, then answers as it should
  (PROTOCOL.md §5.3: read, never called);
* ``full-waits``: a REFUSE with code ``full`` is taken for a place in the waiting line, whatever its ``waiting``
  says (PROTOCOL.md §7, §10);
* ``loose-offset``: the probe converts the reset option ``offset`` with ``int()`` and takes it modulo 1000,
  so that it accepts ``1000`` and ``5.0`` (CONFORMANCE.md §1.3);
* ``repeated-key``: a RESULT's body writes the key ``infos`` twice, first as null (a reader that keeps the last
  value reads it right, but a sender never repeats a key, PROTOCOL.md §3.1);
* ``unwelcomed-previous``: ``previous_session`` is the last session the client said HELLO from, welcomed or not
  (PROTOCOL.md §11.1);
* ``unknown-kind-own-seq``: a message of an unknown kind is answered with ERROR echoing its seq, not seq 0
  (PROTOCOL.md §2.1).
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import gymnasium as gym

from gym_remote import cli, client, codec, probe, protocol, security
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


def seeds_mod_2_64() -> None:
    reset = probe.ProbeEnv.reset

    def _reset(self, *, seed=None, options=None):
        return reset(self, seed=None if seed is None else seed % 2**64, options=options)

    probe.ProbeEnv.reset = _reset


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


def value_actions_of_env_0() -> None:
    read_actions = client.EnvClient._read_actions

    def _read_actions(self, hosted, header, frame, indexes, message):
        actions = read_actions(self, hosted, header, frame, indexes, message)
        return [actions[0]] * len(actions) if header.flags & protocol.FLAG_VALUE else actions

    client.EnvClient._read_actions = _read_actions


def any_version() -> None:
    parse_header = protocol.parse_header
    protocol.parse_header = lambda frame: parse_header(frame)._replace(version=protocol.PROTOCOL_VERSION)


def strict_flags() -> None:
    parse_header = protocol.parse_header
    known = (
        protocol.FLAG_VALUE | protocol.FLAG_DTYPES | protocol.FLAG_SUBSET | protocol.FLAG_CROWDED | protocol.FLAG_EACH
    )

    def strict(frame):
        header = parse_header(frame)
        if header.flags & ~known:
            raise ProtocolError(f"unknown flags {header.flags:#x}")
        return header

    protocol.parse_header = strict


def unpickles() -> None:
    read_value = protocol.read_value
    protocol.read_value = lambda frames, allow_pickle=False: read_value(frames, allow_pickle=True)


def flat_object_arrays() -> None:
    object_array = codec._Decoder._HANDLERS["o"]
    codec._Decoder._HANDLERS["o"] = lambda self, tree, depth: object_array(self, tree, depth).reshape(-1)


def own_spaces() -> None:
    configure = client.HostedEnvs.configure

    def _configure(self, observation_space, action_space, *args, **kwargs):
        configure(self, self.envs[0].observation_space, action_space, *args, **kwargs)

    client.HostedEnvs.configure = _configure


def set_attr_ignores_subset() -> None:
    set_attr = client.HostedEnvs.set_attr

    def _set_attr(self, name, values, indexes=None, outermost=False):
        set_attr(self, name, values, None if indexes is None else list(range(len(indexes))), outermost)

    client.HostedEnvs.set_attr = _set_attr


def hello_once() -> None:
    client.HELLO_REPEAT_SECONDS = 1e9


def no_rejoin() -> None:
    client.EnvClient.reconnect = property(lambda self: False, lambda self, value: None)


def zap_at_once() -> None:
    client.random = SimpleNamespace(uniform=lambda low, high: 0.0)  # type: ignore[assignment]


def each_ignored() -> None:
    step = client.HostedEnvs.step
    client.HostedEnvs.step = lambda self, actions, indexes=None, each=False: step(self, actions, indexes, False)


def counts_anew() -> None:
    connection_dropped = client.EnvClient._connection_dropped

    def _connection_dropped(self):
        dropped = connection_dropped(self)
        if dropped:
            self._cut_handshakes = 0
        return dropped

    client.EnvClient._connection_dropped = _connection_dropped


def each_errors_dropped() -> None:
    send_result = client.EnvClient._send_result

    def _send_result(self, hosted, seq, infos, finals, indexes=None, errors=None):
        send_result(self, hosted, seq, infos, finals, indexes, None)

    client.EnvClient._send_result = _send_result


def has_attr_calls() -> None:
    call_one = client.HostedEnvs._call_one

    def _call_one(env, name, args, kwargs, query):
        if query == protocol.HAS_ATTR_QUERY:
            found = getattr(env.unwrapped, name, None)
            if callable(found):
                found()
        return call_one(env, name, args, kwargs, query)

    client.HostedEnvs._call_one = staticmethod(_call_one)


def full_waits() -> None:
    read_value = protocol.read_value

    def _read_value(frames, allow_pickle=False):
        value = read_value(frames, allow_pickle=allow_pickle)
        if isinstance(value, dict) and value.get("code") == "full" and "waiting" in value:
            value["waiting"] = True
        return value

    protocol.read_value = _read_value


def loose_offset() -> None:
    reset = probe.ProbeEnv.reset

    def loose(self, *, seed=None, options=None):
        if isinstance(options, dict) and isinstance(options.get("offset"), (int, float)):
            options = {**options, "offset": int(options["offset"]) % 1000}
        return reset(self, seed=seed, options=options)

    probe.ProbeEnv.reset = loose


def repeated_key() -> None:
    value_frames = protocol.value_frames

    def twice(*args, **kwargs):
        frames = value_frames(*args, **kwargs)
        body = bytes(frames[0])
        return [b'{"infos":null,' + body[1:], *frames[1:]] if body.startswith(b'{"infos":') else frames

    protocol.value_frames = twice


def unwelcomed_previous() -> None:
    connect = client.EnvClient._connect

    def _connect(self, *args, **kwargs):
        if self.session:
            self._welcomed_session = self.session
        connect(self, *args, **kwargs)

    client.EnvClient._connect = _connect


def unknown_kind_own_seq() -> None:
    protocol._KINDS = frozenset(range(256))  # parse_header lets every kind through; the client's ERROR echoes seq


FLAWS = {
    "floats-as-ints": floats_as_ints,
    "no-heartbeats": no_heartbeats,
    "no-bye": no_bye,
    "sync-autoreset-flags": sync_autoreset_flags,
    "random-seed": random_seed,
    "seeds-mod-2-64": seeds_mod_2_64,
    "secret-bom-kept": secret_bom_kept,
    "host-error-names": host_error_names,
    "equal-keys-kept": equal_keys_kept,
    "value-actions-of-env-0": value_actions_of_env_0,
    "any-version": any_version,
    "strict-flags": strict_flags,
    "unpickles": unpickles,
    "flat-object-arrays": flat_object_arrays,
    "own-spaces": own_spaces,
    "set-attr-ignores-subset": set_attr_ignores_subset,
    "hello-once": hello_once,
    "no-rejoin": no_rejoin,
    "zap-at-once": zap_at_once,
    "each-ignored": each_ignored,
    "counts-anew": counts_anew,
    "each-errors-dropped": each_errors_dropped,
    "has-attr-calls": has_attr_calls,
    "full-waits": full_waits,
    "loose-offset": loose_offset,
    "repeated-key": repeated_key,
    "unwelcomed-previous": unwelcomed_previous,
    "unknown-kind-own-seq": unknown_kind_own_seq,
}

if __name__ == "__main__":
    FLAWS[sys.argv[1]]()
    sys.exit(cli.main(sys.argv[2:]))
