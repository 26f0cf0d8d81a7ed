"""The *values* group: the client's probes, stepped through a RemoteVectorEnv, give exactly what Python
probes give in a SyncVectorEnv (lock-step batches) or stepped one by one (partial batches)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
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
            remote("reset(seed=40)", envs.reset, seed=40)
            reference.reset(seed=40)
            found = []
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
]
