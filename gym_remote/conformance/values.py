"""The *values* group: the client's probes, stepped through a RemoteVectorEnv, give exactly what Python
probes give in a SyncVectorEnv (lock-step batches) or stepped one by one (partial batches)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from gymnasium.error import NoAsyncCallError
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from gym_remote.conformance.check import Check, Context
from gym_remote.conformance.reference import Twins, differences, unbatch
from gym_remote.conformance.report import CheckFailed
from gym_remote.errors import GymRemoteError
from gym_remote.probe import ProbeEnv, probe_spaces
from gym_remote.vector_env import RemoteVectorEnv

__all__ = ["CHECKS"]

CLIENTS = 2
ENVS_PER_CLIENT = 3
NUM_ENVS = CLIENTS * ENVS_PER_CLIENT
STEPS = 30
SEED = 100
WAIT_SECONDS = 30.0
RESULT_NAMES = ("obs", "rewards", "terminations", "truncations", "infos")


@contextlib.contextmanager
def served_vector(
    context: Context,
    mode: AutoresetMode = AutoresetMode.NEXT_STEP,
    clients: int = CLIENTS,
    envs_per_client: int = ENVS_PER_CLIENT,
    *,
    endpoint: str | None = None,
    client_endpoint: str | None = None,
    client_security: Sequence[str] = (),
    **kwargs: Any,
) -> Iterator[RemoteVectorEnv]:
    """A RemoteVectorEnv on the probe's spaces with a slot for each env of ``clients`` client processes,
    which are started for it (at ``client_endpoint``, default the server's endpoint); closed at the end."""
    endpoint = endpoint or context.endpoint()
    envs = probe_vector(endpoint, clients * envs_per_client, context.liveness_timeout, mode, **kwargs)
    try:
        for _ in range(clients):
            context.start_client(client_endpoint or endpoint, envs_per_client, security=client_security)
        yield envs
    finally:
        envs.close()


def probe_vector(
    endpoint: str,
    num_envs: int,
    liveness_timeout: float,
    mode: AutoresetMode = AutoresetMode.NEXT_STEP,
    **kwargs: Any,
) -> RemoteVectorEnv:
    """A RemoteVectorEnv of ``num_envs`` slots on the probe's spaces bound at ``endpoint``, for clients to join."""
    observation_space, action_space = probe_spaces()
    return RemoteVectorEnv(
        num_envs=num_envs,
        bind=endpoint,
        observation_space=observation_space,
        action_space=action_space,
        autoreset_mode=mode,
        connect_timeout=WAIT_SECONDS,
        timeout=WAIT_SECONDS,
        liveness_timeout=liveness_timeout,
        **kwargs,
    )


def reference_vector(mode: AutoresetMode) -> SyncVectorEnv:
    return SyncVectorEnv([ProbeEnv] * NUM_ENVS, autoreset_mode=mode)


def compare(what: str, actual: Sequence[Any], expected: Sequence[Any], names: Sequence[str] = RESULT_NAMES) -> None:
    """Raise CheckFailed listing every difference between two results (of ``step``, ``reset``, ``recv``)."""
    found = []
    for name, a, e in zip(names, actual, expected):
        found.extend(differences(a, e, name))
    if found:
        lines = "\n".join(f"  {line}" for line in found)
        raise CheckFailed(f"{what}: the client's results differ from the Python probe's (the reference):\n{lines}")


def remote(what: str, call, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` on the RemoteVectorEnv; its errors fail the check, saying during what."""
    try:
        return call(*args, **kwargs)
    except GymRemoteError as error:
        raise CheckFailed(f"{what}: the RemoteVectorEnv raised {type(error).__name__}: {error}") from error


def actions_for(space, step: int) -> Any:
    """The batched actions of ``step``: sampled; every third step the Box leaf as float64 (a STEP with dtypes)."""
    actions = space.sample()
    if step % 3 == 2:
        actions = (actions[0], actions[1].astype(np.float64), actions[2])
    return actions


def lock_step(mode: AutoresetMode, masks: bool):
    def check(context: Context) -> None:
        reference = reference_vector(mode)
        try:
            with served_vector(context, mode) as envs:
                envs.action_space.seed(SEED)
                actual = remote("reset(seed=100)", envs.reset, seed=SEED)
                compare("reset(seed=100)", actual, reference.reset(seed=SEED), ("obs", "infos"))
                seeds = [7, None, 3, None, 999, 12]
                options = {"offset": 5}
                compare(
                    f"reset(seed={seeds}, options={options})",
                    remote("reset with seeds and options", envs.reset, seed=seeds, options=dict(options)),
                    reference.reset(seed=seeds, options=dict(options)),
                    ("obs", "infos"),
                )
                for step in range(STEPS):
                    actions = actions_for(envs.action_space, step)
                    actual = remote(f"step {step}", envs.step, actions)
                    expected = reference.step(actions)
                    compare(f"step {step} ({mode.value})", actual, expected)
                    done = expected[2] | expected[3]
                    if masks and done.any():
                        what = f"reset(options={{'reset_mask': {done.astype(int).tolist()}}}) after step {step}"
                        actual = remote(what, envs.reset, options={"reset_mask": done.copy()})
                        compare(what, actual, reference.reset(options={"reset_mask": done.copy()}), ("obs", "infos"))
        finally:
            reference.close()

    return check


def partial(mode: AutoresetMode):
    def check(context: Context) -> None:
        twins = Twins(NUM_ENVS, mode)
        rng = np.random.default_rng(SEED)
        _, action_space = probe_spaces()
        action_space.seed(SEED)
        expected: dict[int, Any] = {}  # each slot's result to come, from its own probe

        def send(envs: RemoteVectorEnv, ids: Any, what: str) -> None:
            """Sampled actions to the slots ``ids``, and each slot's own probe stepped with its action."""
            actions = [action_space.sample() for _ in ids]
            remote(what, envs.send, tuple(np.stack([a[leaf] for a in actions]) for leaf in range(3)), ids)
            for slot, action in zip(ids, actions):
                expected[int(slot)] = twins.step(int(slot), action)

        try:
            with served_vector(context, mode, batch_size=2) as envs:
                remote("async_reset(seed=100)", envs.async_reset, seed=SEED)
                expected.update({slot: twins.reset(slot, SEED + slot) for slot in range(NUM_ENVS)})
                for round_number in range(3 * STEPS):
                    results = remote(f"recv() {round_number}", envs.recv)
                    slots = results[4]["env_id"].tolist()
                    got = unbatch(envs.single_observation_space, results, len(slots))
                    for slot, result in zip(slots, got):
                        reference = expected.pop(slot)
                        # a batched info orders its keys by the rows before this one: ask for the reference's order
                        result = (*result[:4], _ordered_as(result[4], reference[4]))
                        compare(f"recv() {round_number}, slot {slot} ({mode.value})", result, reference)
                    chosen = [slot for slot in slots if rng.random() < 0.8] or slots[:1]
                    send(envs, np.asarray(chosen), f"send() {round_number}")
                    idle = [slot for slot in range(NUM_ENVS) if slot not in expected]
                    if idle and round_number % 5 == 4:
                        send(envs, idle, "send() to idle slots")  # ids as a list this time
        finally:
            twins.close()

    return check


def _ordered_as(info: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """``info`` with the keys it shares with ``reference`` first, in ``reference``'s order."""
    ordered = {key: info[key] for key in reference if key in info}
    ordered.update((key, value) for key, value in info.items() if key not in ordered)
    return ordered


def calls_and_attributes(context: Context) -> None:
    reference = reference_vector(AutoresetMode.NEXT_STEP)
    try:
        with served_vector(context, AutoresetMode.NEXT_STEP) as envs:
            found = differences(  # -1 before any seeded reset (CONFORMANCE.md §1.6, PROTOCOL.md §11)
                remote("get_attr('np_random_seed') before any reset", envs.get_attr, "np_random_seed"),
                reference.get_attr("np_random_seed"),
                "get_attr('np_random_seed') before any seeded reset",
            )
            remote("reset(seed=40)", envs.reset, seed=40)
            reference.reset(seed=40)
            found += differences(
                remote("call('render')", envs.call, "render"), reference.call("render"), "call('render')"
            )
            found += differences(
                remote("get_attr('np_random_seed')", envs.get_attr, "np_random_seed"),
                reference.get_attr("np_random_seed"),
                "get_attr('np_random_seed')",
            )
            labels = ["a", 2, 3.0, (1, "x"), None, [np.int32(5)]]
            remote("set_attr('label', ...)", envs.set_attr, "label", labels)
            reference.set_attr("label", labels)
            found += differences(
                remote("get_attr('label')", envs.get_attr, "label"),
                reference.get_attr("label"),
                "get_attr('label') after set_attr('label', ...)",
            )
            found += differences(
                remote("get_attr('metadata')", envs.get_attr, "metadata"),
                reference.get_attr("metadata"),
                "get_attr('metadata')",
            )
            remote("reset() without seeds", envs.reset)
            reference.reset()
            found += differences(  # a reset without a seed keeps the last one
                remote("get_attr('np_random_seed') after reset()", envs.get_attr, "np_random_seed"),
                reference.get_attr("np_random_seed"),
                "get_attr('np_random_seed') after reset(seed=40), then reset() without seeds",
            )
            if found:
                lines = "\n".join(f"  {line}" for line in found)
                raise CheckFailed(f"the client's answers to calls differ from the Python probe's:\n{lines}")
            try:
                envs.get_attr("no_such_attribute")
            except AttributeError:
                pass
            except GymRemoteError as error:
                raise CheckFailed(
                    "get_attr('no_such_attribute') raised "
                    f"{type(error).__name__}, not AttributeError: the client's ERROR must have type "
                    f"'AttributeError' and module 'builtins' (PROTOCOL.md §5.3, §8): {error}"
                ) from error
            else:
                raise CheckFailed("get_attr('no_such_attribute') returned instead of raising AttributeError")
            remote("step after the failed call", envs.step, envs.action_space.sample())
    finally:
        reference.close()


SEEDS_OF_ONE_CLIENT = [0, 1, 2]
"""Seeds of the failing-env checks' probes: env 0 has base 0, so its episode terminates at its second step
(``term_step = 2 + 0 % 5``)."""


@contextlib.contextmanager
def one_client_reset(context: Context) -> Iterator[tuple[RemoteVectorEnv, Twins]]:
    """A NextStep vector of one client's probes and a twin probe for each slot, all reset with
    :data:`SEEDS_OF_ONE_CLIENT` (each env its own probe: SyncVectorEnv would keep every autoreset flag together)."""
    twins = Twins(ENVS_PER_CLIENT, AutoresetMode.NEXT_STEP)
    try:
        with served_vector(context, AutoresetMode.NEXT_STEP, clients=1, envs_per_client=ENVS_PER_CLIENT) as envs:
            remote(f"reset(seed={SEEDS_OF_ONE_CLIENT})", envs.reset, seed=SEEDS_OF_ONE_CLIENT)
            for slot, seed in enumerate(SEEDS_OF_ONE_CLIENT):
                twins.reset(slot, seed)
            yield envs, twins
    finally:
        twins.close()


def directed(directions: Sequence[float], dtype: Any = np.int64) -> tuple:
    """Batched probe actions with these directions, no push and no bits pressed."""
    count = len(directions)
    return (np.array(directions, dtype=dtype), np.zeros((count, 2), np.float32), np.zeros((count, 2), np.int8))


def raises_for(what: str, call: Callable[[], Any], slot: int, reported: str) -> None:
    """``call()`` must raise the ValueError of the probe of ``slot``, which was given a NaN direction; ``reported``:
    what carries the error from the client, and where the protocol says so."""
    try:
        call()
    except ValueError as error:
        if getattr(error, "slot", None) != slot:
            raise CheckFailed(
                f"{what} raised for slot {getattr(error, 'slot', None)}, not for slot {slot}, whose direction was "
                f"NaN: {error}"
            ) from error
    except GymRemoteError as error:
        raise CheckFailed(
            f"{what} raised {type(error).__name__}, not ValueError for slot {slot}: a probe given a NaN direction "
            f"raises ValueError, which {reported} must name (type 'ValueError', module 'builtins', CONFORMANCE.md "
            f"§1.4): {error}"
        ) from error
    else:
        raise CheckFailed(f"{what} returned, but the probe of slot {slot} was given a NaN direction")


def failing_env_stops_a_lock_step(context: Context) -> None:
    """PROTOCOL.md §5.6: without FLAG_EACH a client stops at the env that raises; the envs before it keep what
    their step gave them, their autoreset flags included, and the envs after it are not stepped."""

    def compare_each(what: str, results: Sequence[Any], expected: Sequence[Any]) -> None:
        got = unbatch(probe_spaces()[0], results, ENVS_PER_CLIENT)
        for slot, (result, reference) in enumerate(zip(got, expected)):
            result = (*result[:4], _ordered_as(result[4], reference[4]))
            compare(f"{what}, slot {slot}", result, reference)

    with one_client_reset(context) as (envs, twins):
        step = directed([0, 0, 0])
        results = remote("the first step", envs.step, step)
        compare_each("the first step", results, [twins.step(slot, row) for slot, row in enumerate(zip(*step))])
        failing = directed([0.0, math.nan, 0.0], np.float64)  # env 1 cannot take a NaN direction (§1.4)
        raises_for("the second step", lambda: envs.step(failing), 1, "the client's ERROR (PROTOCOL.md §8)")
        twins.step(0, next(zip(*failing)))  # env 0 ends its episode; env 1 raised; env 2 was never stepped
        step = directed([1, 1, 1])
        results = remote("the step after the failed one", envs.step, step)
        compare_each(
            "the step after a step in which env 1 raised (env 0 must reset, as its episode ended in the failed "
            "step; env 1 and env 2 step from where they were, PROTOCOL.md §5.6)",
            results,
            [twins.step(slot, row) for slot, row in enumerate(zip(*step))],
        )


def failing_env_in_a_partial_batch(context: Context) -> None:
    """PROTOCOL.md §5.6: a partial batch's STEP carries FLAG_SUBSET and FLAG_EACH; an env that raises in it costs no
    other env its result. The client answers with a RESULT whose ``errors`` list names the env that raised, the
    learner raises for that slot alone, and every env's autoreset state afterwards is its own probe's."""

    def received(what: str, envs: RemoteVectorEnv, expected: dict[int, Any]) -> None:
        """recv() gives exactly the slots of ``expected``, each equal to its own probe's result."""
        results = remote(what, envs.recv)
        slots = results[4]["env_id"].tolist()
        if sorted(slots) != sorted(expected):
            raise CheckFailed(
                f"{what} returned the slots {slots}, expected {sorted(expected)}: with FLAG_EACH every env of the STEP "
                "that did not raise has its result in the RESULT (PROTOCOL.md §5.6)"
            )
        for slot, result in zip(slots, unbatch(envs.single_observation_space, results, len(slots))):
            reference = expected[slot]
            compare(f"{what}, slot {slot}", (*result[:4], _ordered_as(result[4], reference[4])), reference)

    with one_client_reset(context) as (envs, twins):
        first = directed([0, 0])
        remote("send() to slots [2, 0]", envs.send, first, [2, 0])
        rows = list(zip(*first))
        received("the first recv()", envs, {2: twins.step(2, rows[0]), 0: twins.step(0, rows[1])})
        # one STEP for slots [2, 0, 1]: env 2 is given a NaN direction, env 0 ends its episode
        failing = directed([math.nan, 0.0, 1.0], np.float64)
        remote("send() to slots [2, 0, 1], slot 2 with a NaN direction", envs.send, failing, [2, 0, 1])
        raises_for("recv()", envs.recv, 2, "the RESULT's 'errors' entry for it (PROTOCOL.md §5.6)")
        rows = list(zip(*failing))
        expected = {0: twins.step(0, rows[1]), 1: twins.step(1, rows[2])}  # env 2 raised: its state is unchanged
        try:
            received("the recv() after the one that raised for slot 2", envs, expected)
        except NoAsyncCallError as error:
            raise CheckFailed(
                "after recv() raised for slot 2, no result of slots 0 and 1 was in flight: the client must answer a "
                "STEP with FLAG_EACH with a RESULT for every env, listing the env that raised in 'errors', and not "
                f"answer ERROR (PROTOCOL.md §5.6): {error}"
            ) from error
        step = directed([1, 1, 1])
        remote("send() to slots [0, 1, 2]", envs.send, step, [0, 1, 2])
        received(
            "the recv() after a partial batch in which env 2 raised (env 0 must reset, as its episode ended in "
            "that STEP; env 1 and env 2 step from where they were, PROTOCOL.md §5.6)",
            envs,
            {slot: twins.step(slot, row) for slot, row in enumerate(zip(*step))},
        )


CHECKS = [
    Check("values", "lock-step batches match SyncVectorEnv, NextStep", lock_step(AutoresetMode.NEXT_STEP, False)),
    Check("values", "lock-step batches match SyncVectorEnv, SameStep", lock_step(AutoresetMode.SAME_STEP, False)),
    Check(
        "values",
        "lock-step batches match SyncVectorEnv, Disabled with reset masks",
        lock_step(AutoresetMode.DISABLED, True),
    ),
    Check("values", "partial batches match each slot's own probe, NextStep", partial(AutoresetMode.NEXT_STEP)),
    Check("values", "partial batches match each slot's own probe, SameStep", partial(AutoresetMode.SAME_STEP)),
    Check("values", "calls and attributes match SyncVectorEnv", calls_and_attributes),
    Check(
        "values",
        "an env that raises stops a lock-step step; the others keep their own autoreset state",
        failing_env_stops_a_lock_step,
    ),
    Check(
        "values",
        "an env that raises in a partial batch (FLAG_EACH) costs no other env its result",
        failing_env_in_a_partial_batch,
    ),
]
