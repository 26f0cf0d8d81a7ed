"""RemoteVectorEnv returns exactly what gymnasium.vector.SyncVectorEnv returns.

Every test builds a ``SyncVectorEnv`` and a ``RemoteVectorEnv`` from the same ``env_fns``, drives both
with the same seeds, actions and reset masks, and compares every returned value exactly (types,
dtypes, shapes, keys, key order, ``_key`` masks, values), step after step.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import batch_space

from gym_remote import RemoteVectorEnv
from gym_remote.gymnasium_versions import GYMNASIUM_VERSION
from gym_remote.links import zeromq
from tests.envs import ACTION_SPACES, SPACES, OptionsRequiredEnv, SpaceEnv, make_cartpole, make_wrapped_env, space_env

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]
MODE_IDS = ["next_step", "same_step", "disabled"]
WALL_CLOCK = frozenset({"t"})
"""Info keys holding wall-clock times (RecordEpisodeStatistics' ``episode["t"]``): values not compared."""


# ---------------------------------------------------------------------------------------------------
# exact comparison


class Mismatch(AssertionError):
    pass


def _name(kind: type) -> str:
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _float_same(a: Any, b: Any) -> bool:
    """Equal, or both NaN; 0.0 and -0.0 differ."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def assert_same(sync: Any, remote: Any, path: str = "value", *, loose: frozenset[str] = frozenset()) -> None:
    """Assert ``remote`` is exactly ``sync``: same types (recursively), dtypes, shapes, keys, values.

    ``loose`` names dict keys whose values may differ (wall-clock times): only their type is compared.
    """

    def fail(reason: str) -> None:
        raise Mismatch(f"{path}: {reason}\n  sync:   {sync!r}\n  remote: {remote!r}")

    if type(sync) is not type(remote):
        fail(f"type {_name(type(sync))} != {_name(type(remote))}")
    if isinstance(sync, dict):
        if list(sync.keys()) != list(remote.keys()):
            missing = [k for k in sync if k not in remote]
            extra = [k for k in remote if k not in sync]
            fail(
                f"keys differ (missing in remote: {missing}, extra in remote: {extra}, "
                f"order sync={list(sync)} remote={list(remote)})"
            )
        for key in sync:
            if key in loose:
                if type(sync[key]) is not type(remote[key]):
                    raise Mismatch(f"{path}[{key!r}]: type {_name(type(sync[key]))} != {_name(type(remote[key]))}")
                if isinstance(sync[key], np.ndarray) and (sync[key].dtype, sync[key].shape) != (
                    remote[key].dtype,
                    remote[key].shape,
                ):
                    raise Mismatch(f"{path}[{key!r}]: dtype/shape differ: {sync[key]!r} vs {remote[key]!r}")
                continue
            assert_same(sync[key], remote[key], f"{path}[{key!r}]", loose=loose)
    elif isinstance(sync, (list, tuple)):  # also GraphInstance and other named tuples
        if len(sync) != len(remote):
            fail(f"length {len(sync)} != {len(remote)}")
        for index, (a, b) in enumerate(zip(sync, remote, strict=True)):
            assert_same(a, b, f"{path}[{index}]", loose=loose)
    elif isinstance(sync, np.ndarray):
        if sync.dtype != remote.dtype:
            fail(f"dtype {sync.dtype} != {remote.dtype}")
        if sync.shape != remote.shape:
            fail(f"shape {sync.shape} != {remote.shape}")
        if sync.dtype == object:
            for index in np.ndindex(sync.shape):
                assert_same(sync[index], remote[index], f"{path}[{', '.join(map(str, index))}]", loose=loose)
        elif sync.dtype.kind in "fc":
            if not np.array_equal(sync, remote, equal_nan=True):
                differ = ~((sync == remote) | (np.isnan(sync) & np.isnan(remote)))
                first = tuple(int(i) for i in np.argwhere(differ)[0])
                fail(
                    f"values differ at {int(differ.sum())} places, first at {first}: "
                    f"{sync[first].item()!r} != {remote[first].item()!r}"
                )
            if sync.dtype.kind == "f" and not np.array_equal(np.signbit(sync), np.signbit(remote)):
                fail("signs of zeros differ")
        elif not np.array_equal(sync, remote):
            first = tuple(int(i) for i in np.argwhere(sync != remote)[0]) if sync.ndim else ()
            fail(f"values differ, first at {first}")
    elif isinstance(sync, np.generic):
        if sync.dtype != remote.dtype:
            fail(f"dtype {sync.dtype} != {remote.dtype}")
        if sync.dtype.kind == "f":
            if not _float_same(float(sync), float(remote)):
                fail("values differ")
        elif sync.dtype.kind == "c":
            if not (_float_same(sync.real, remote.real) and _float_same(sync.imag, remote.imag)):
                fail("values differ")
        elif not bool(sync == remote):
            fail("values differ")
    elif isinstance(sync, float):
        if not _float_same(sync, remote):
            fail("values differ")
    elif isinstance(sync, gym.Space):
        if sync != remote:
            fail("spaces differ")
    else:
        if not bool(sync == remote):
            fail("values differ")


def same_result(sync: tuple, remote: tuple, where: str, *, loose: frozenset[str] = frozenset()) -> None:
    """Compare the results of ``reset`` (obs, infos) or ``step`` (obs, rewards, terminations, truncations, infos)."""
    names = ("obs", "infos") if len(sync) == 2 else ("obs", "rewards", "terminations", "truncations", "infos")
    assert type(remote) is tuple and len(remote) == len(sync) == len(names), f"{where}: {remote!r}"
    for name, a, b in zip(names, sync, remote, strict=True):
        assert_same(a, b, f"{where}: {name}", loose=loose)


def leaves(value: Any) -> Iterator[np.ndarray]:
    """The numeric numpy arrays inside a (batched) observation."""
    if isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from leaves(item)
    elif isinstance(value, np.ndarray) and value.dtype != object:
        yield value


# ---------------------------------------------------------------------------------------------------
# running a Sync/Remote pair


@contextlib.contextmanager
def env_pair(env_fns: list[Callable], **kwargs: Any) -> Iterator[tuple[SyncVectorEnv, RemoteVectorEnv]]:
    """A SyncVectorEnv and a RemoteVectorEnv of the same env_fns; both closed afterwards."""
    remote_only = {key: kwargs.pop(key) for key in ("num_clients",) if key in kwargs}
    sync = SyncVectorEnv(env_fns, **kwargs)
    remote = None
    try:
        # a (batched, single) space pair is used as given: each env gets its own copy
        kwargs = copy.deepcopy(kwargs) if isinstance(kwargs.get("observation_mode"), tuple) else kwargs
        remote = RemoteVectorEnv(env_fns, **kwargs, **remote_only, timeout=60.0, connect_timeout=60.0)
        yield sync, remote
    finally:
        try:
            if remote is not None:
                remote.close()
        finally:
            sync.close()


def assert_same_construction(sync: SyncVectorEnv, remote: RemoteVectorEnv) -> None:
    assert remote.num_envs == sync.num_envs
    assert remote.metadata["autoreset_mode"] is sync.autoreset_mode
    assert isinstance(remote.metadata["autoreset_mode"], AutoresetMode)
    assert_same(sync.metadata, remote.metadata, "metadata")
    assert remote.render_mode == sync.render_mode
    assert remote.autoreset_mode is sync.autoreset_mode
    assert_same(sync.single_observation_space, remote.single_observation_space, "single_observation_space")
    assert_same(sync.observation_space, remote.observation_space, "observation_space")
    assert_same(sync.single_action_space, remote.single_action_space, "single_action_space")
    assert_same(sync.action_space, remote.action_space, "action_space")
    # seeded alike, the spaces sample alike (the batched spaces are fresh objects: seeding them is harmless)
    for name in ("action_space", "observation_space"):
        sync_space, remote_space = getattr(sync, name), getattr(remote, name)
        sync_space.seed(123)
        remote_space.seed(123)
        assert_same(sync_space.sample(), remote_space.sample(), f"{name}.sample() after seed(123)")


def run_pair(
    env_fns: list[Callable],
    *,
    autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
    steps: int = 200,
    seeds: tuple[int, ...] = (0,),
    copy_obs: bool = True,
    observation_mode: Any = "same",
    num_clients: int | None = None,
    partial_resets: bool = False,
    loose: frozenset[str] = frozenset(),
) -> dict[str, int]:
    """Drive a Sync and a Remote env side by side, comparing everything they return.

    In DISABLED mode the finished envs are reset with ``options={"reset_mask": ...}`` after every
    step where any finished (with per-env seeds every other time). With ``partial_resets``, random
    non-empty masks are also reset now and then (in any mode). Returns counts of what happened.
    """
    counts = {"steps": 0, "terminations": 0, "truncations": 0, "masked_resets": 0, "final_obs": 0}
    with env_pair(
        env_fns,
        copy=copy_obs,
        observation_mode=observation_mode,
        autoreset_mode=autoreset_mode,
        num_clients=num_clients,
    ) as (sync, remote):
        assert_same_construction(sync, remote)
        n = sync.num_envs
        for seed in seeds:
            where = f"seed {seed} reset"
            sync_obs, sync_info = sync.reset(seed=seed, options={"run": seed})
            remote_obs, remote_info = remote.reset(seed=seed, options={"run": seed})
            assert_same(sync_obs, remote_obs, f"{where}: obs")
            assert_same(sync_info, remote_info, f"{where}: infos", loose=loose)
            assert_same(sync.np_random_seed, remote.np_random_seed, f"{where}: np_random_seed")
            assert remote.np_random_seed == tuple(seed + i for i in range(n))
            actions_space = copy.deepcopy(sync.action_space)
            actions_space.seed(seed + 1000)
            mask_rng = np.random.default_rng(seed)
            previous = None  # (remote obs returned before, a deep copy of it, sync obs returned before)
            for t in range(steps):
                where = f"seed {seed} step {t} ({autoreset_mode.name}, copy={copy_obs})"
                actions = actions_space.sample()
                remote_actions = copy.deepcopy(actions)
                sync_result = sync.step(actions)
                remote_result = remote.step(remote_actions)
                assert_same(actions, remote_actions, f"{where}: the actions (must not be changed by step)")
                for name, a, b in zip(
                    ("obs", "rewards", "terminations", "truncations", "infos"), sync_result, remote_result, strict=True
                ):
                    assert_same(a, b, f"{where}: {name}", loose=loose if name == "infos" else frozenset())
                assert remote_result[1].dtype == np.float64
                assert remote_result[2].dtype == np.bool_ and remote_result[3].dtype == np.bool_
                if previous is not None:
                    old_remote, snapshot, old_sync = previous
                    if copy_obs:  # an observation returned earlier is never changed by a later step
                        assert_same(snapshot, old_remote, f"{where}: the previous step's obs (copy=True)")
                    else:  # copy=False: the same buffer re-use as SyncVectorEnv
                        sync_shared = [np.shares_memory(x, y) for x, y in zip(leaves(old_sync), leaves(sync_result[0]))]
                        remote_shared = [
                            np.shares_memory(x, y) for x, y in zip(leaves(old_remote), leaves(remote_result[0]))
                        ]
                        assert sync_shared == remote_shared, f"{where}: buffer re-use differs (copy=False)"
                previous = (remote_result[0], copy.deepcopy(remote_result[0]), sync_result[0])
                counts["steps"] += 1
                counts["terminations"] += int(sync_result[2].sum())
                counts["truncations"] += int(sync_result[3].sum())
                counts["final_obs"] += int("final_obs" in sync_result[4])
                done = np.logical_or(sync_result[2], sync_result[3])
                mask = None
                if autoreset_mode is AutoresetMode.DISABLED and done.any():
                    mask = done
                elif partial_resets and mask_rng.random() < 0.1:
                    mask = mask_rng.random(n) < 0.5
                    mask[mask_rng.integers(n)] = True
                if mask is not None:
                    counts["masked_resets"] += 1
                    reset_seeds = None
                    if t % 2:
                        reset_seeds = [seed * 1000 + t + i if mask[i] else None for i in range(n)]
                    sync_options = {"reset_mask": mask.copy(), "at_step": t}
                    remote_options = {"reset_mask": mask.copy(), "at_step": t}
                    sync_obs, sync_info = sync.reset(seed=reset_seeds, options=sync_options)
                    remote_obs, remote_info = remote.reset(seed=reset_seeds, options=remote_options)
                    where = f"seed {seed} step {t} masked reset {mask.tolist()}"
                    assert_same(sync_obs, remote_obs, f"{where}: obs")
                    assert_same(sync_info, remote_info, f"{where}: infos", loose=loose)
                    assert_same(sync_options, remote_options, f"{where}: the options dict after reset")
                    if reset_seeds is not None:
                        assert_same(sync.np_random_seed, remote.np_random_seed, f"{where}: np_random_seed")
                    previous = None
            assert_same(sync.np_random_seed, remote.np_random_seed, f"seed {seed} end: np_random_seed")
    return counts


def fns(count: int, **kwargs: Any) -> list[Callable]:
    """``count`` env functions of :class:`tests.envs.SpaceEnv` with env_id 0..count-1."""
    return [functools.partial(space_env, env_id=i, **kwargs) for i in range(count)]


# ---------------------------------------------------------------------------------------------------
# autoreset modes with rich infos


@pytest.mark.alternate_planes
@pytest.mark.parametrize("copy_obs", [True, False], ids=["copy", "nocopy"])
@pytest.mark.parametrize("num_clients", [1, 2, 5])
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_autoreset_modes_rich_infos(mode, num_clients, copy_obs):
    counts = run_pair(
        fns(5, observation_space="dict_of_tuple_of_box", info_kind="rich", max_steps=12, terminate_prob=0.08),
        autoreset_mode=mode,
        steps=250,
        seeds=(0, 12345),
        copy_obs=copy_obs,
        num_clients=num_clients,
    )
    # the runs do cover many ends of episodes, by termination and by truncation
    assert counts["terminations"] >= 20 and counts["truncations"] >= 20, counts
    if mode is AutoresetMode.SAME_STEP:
        assert counts["final_obs"] >= 20, counts
    if mode is AutoresetMode.DISABLED:
        assert counts["masked_resets"] >= 20, counts


def test_first_env_reporting_a_key_fixes_its_dtype():
    """Each env in its own client: the batch dtype still comes from the first env (in slot order)."""
    with env_pair(fns(5, info_kind="rich"), num_clients=5) as (sync, remote):
        sync_infos = sync.reset(seed=0)[1]
        remote_infos = remote.reset(seed=0)[1]
        assert_same(sync_infos, remote_infos, "reset infos")
        actions = np.zeros(5, dtype=np.int64)
        sync_infos = sync.step(actions)[4]
        remote_infos = remote.step(actions)[4]
        assert_same(sync_infos, remote_infos, "step infos")
    expected = {
        "int_then_float": np.array([3, 3, 4, 5, 6]),
        "bool_then_int": np.array([True, True, True, True, True]),
        "float_then_int": np.array([0.5, 1.0, 2.0, 3.0, 4.0]),
        "np_int8_then_int": np.array([-1, 100, 72, 44, 16], dtype=np.int8),
        "from_env_1": np.array([0.0, 1 / 3, 14, 21, 28], dtype=np.float32),
        "np_bool": np.array([remote_infos["np_bool"][i] for i in range(5)], dtype=object),
        "where": np.array(["step"] * 5, dtype=object),
    }
    for key, value in expected.items():
        assert_same(value, remote_infos[key], f"infos[{key!r}]")
    assert_same(np.array([False, True, True, True, True]), remote_infos["_from_env_1"], "infos['_from_env_1']")
    assert_same(np.array([True, False, True, False, True]), remote_infos["_even_only"], "infos['_even_only']")


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_single_env(mode):
    run_pair(
        fns(1, info_kind="rich", observation_space="dict_with_sequence", max_steps=6),
        autoreset_mode=mode,
        steps=100,
        seeds=(8,),
        num_clients=1,
    )


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_sparse_and_empty_infos(mode):
    """Infos that are mostly empty (keys on few steps), and envs that never report any."""
    env_fns = fns(3, info_kind="sparse", max_steps=9, observation_space="box_u8_image")
    env_fns.append(
        functools.partial(space_env, env_id=3, info_kind="none", max_steps=9, observation_space="box_u8_image")
    )
    run_pair(env_fns, autoreset_mode=mode, steps=250, seeds=(3,), num_clients=2)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_exotic_info_values(mode):
    """bytes, numpy str/complex/float16 scalars, datetime arrays, inf/NaN/-0.0, custom objects, int keys."""
    run_pair(
        fns(4, info_kind="exotic", max_steps=7, terminate_prob=0.1, observation_space="text"),
        autoreset_mode=mode,
        steps=120,
        seeds=(5,),
        num_clients=2,
    )


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_partial_resets_in_every_mode(mode):
    """reset(options={"reset_mask": mask}) mid-run, with and without per-env seeds, in every mode."""
    counts = run_pair(
        fns(4, info_kind="rich", max_steps=15, observation_space="tuple_with_text"),
        autoreset_mode=mode,
        steps=200,
        seeds=(21,),
        num_clients=3,
        partial_resets=True,
    )
    assert counts["masked_resets"] >= 10, counts


def test_autoreset_mode_given_as_string():
    with env_pair(fns(2), autoreset_mode="SameStep", num_clients=1) as (sync, remote):
        assert remote.autoreset_mode is AutoresetMode.SAME_STEP
        assert_same_construction(sync, remote)


# ---------------------------------------------------------------------------------------------------
# every observation space, in every mode


SPACE_NAMES = list(SPACES)


@pytest.mark.alternate_planes
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("space", SPACE_NAMES)
def test_observation_space(space, mode):
    index = SPACE_NAMES.index(space) + MODES.index(mode)
    run_pair(
        fns(4, observation_space=space, info_kind="sparse", max_steps=8, terminate_prob=0.1),
        autoreset_mode=mode,
        steps=80,
        seeds=(index,),
        # (the plane follows index % 3, see alternate_planes: copy and no copy, and each number of clients,
        # meet every plane)
        copy_obs=index // 3 % 2 == 0,
        num_clients=[1, 2, 4][(index + index // 3) % 3],
    )


@pytest.mark.alternate_planes
@pytest.mark.parametrize("action_space", list(ACTION_SPACES))
def test_action_space(action_space):
    index = list(ACTION_SPACES).index(action_space)
    run_pair(
        fns(4, action_space=action_space, observation_space="dict", info_kind="rich", max_steps=10),
        autoreset_mode=MODES[index % 3],
        steps=120,
        seeds=(index,),
        num_clients=[2, 4, 1][index % 3],
    )


# ---------------------------------------------------------------------------------------------------
# observation_mode="different" (and a custom space pair)


def _different_box_fns() -> list[Callable]:
    return [
        functools.partial(
            space_env, env_id=i, observation_space=spaces.Box(-1.0 - i, 1.0 + 2 * i, (3,), dtype=np.float32)
        )
        for i in range(4)
    ]


def _different_dict_fns() -> list[Callable]:
    return [
        functools.partial(
            space_env,
            env_id=i,
            observation_space=spaces.Dict(
                {
                    "pos": spaces.Box(np.array([0.0, -i]), np.array([1.0 + i, 0.0]), dtype=np.float64),
                    "count": spaces.Discrete(3 + i, start=i),
                }
            ),
        )
        for i in range(4)
    ]


def _different_discrete_fns() -> list[Callable]:
    return [
        functools.partial(space_env, env_id=i, observation_space=spaces.Discrete(2 + i, start=-i)) for i in range(4)
    ]


DIFFERENT = {"box": _different_box_fns, "dict": _different_dict_fns, "discrete": _different_discrete_fns}


@pytest.mark.alternate_planes
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", list(DIFFERENT))
def test_observation_mode_different(case, mode):
    env_fns = DIFFERENT[case]()
    with env_pair(env_fns, observation_mode="different", num_clients=2) as (sync, remote):
        # the batched space takes each env's own bounds
        assert_same(sync.observation_space, remote.observation_space, "observation_space")
        assert remote.observation_space != batch_space(remote.single_observation_space, 4)
    run_pair(
        env_fns,
        observation_mode="different",
        autoreset_mode=mode,
        steps=150,
        seeds=(1, 2),
        num_clients=[1, 2, 4][MODES.index(mode)],
    )


def test_observation_mode_space_pair():
    single = spaces.Box(-10.0, 10.0, (3,), dtype=np.float32)
    batched = spaces.Box(-10.0, 10.0, (4, 3), dtype=np.float32)
    run_pair(_different_box_fns(), observation_mode=(batched, single), steps=100, num_clients=2)


_F32 = np.float32
SPACE_MISMATCHES = {
    "same_mode_other_bounds": ("same", [spaces.Box(-1.0, 1.0, (3,), _F32), spaces.Box(-2.0, 2.0, (3,), _F32)], None),
    "same_mode_other_shape": ("same", [spaces.Box(-1.0, 1.0, (3,), _F32), spaces.Box(-1.0, 1.0, (2,), _F32)], None),
    "different_mode_other_shape": (
        "different",
        [spaces.Box(-1.0, 1.0, (3,), _F32), spaces.Box(-1.0, 1.0, (2,), _F32)],
        None,
    ),
    "different_mode_other_dtype": (
        "different",
        [spaces.Box(-1.0, 1.0, (3,), _F32), spaces.Box(-1.0, 1.0, (3,), np.float64)],
        None,
    ),
    "different_mode_other_type": ("different", [spaces.Box(-1.0, 1.0, (3,), _F32), spaces.Discrete(3)], None),
    "action_spaces": ("same", None, [spaces.Discrete(3), spaces.Discrete(4)]),
    "custom_pair_other_shape": (
        (spaces.Box(-1.0, 1.0, (3, 3), _F32), spaces.Box(-1.0, 1.0, (3,), _F32)),
        [spaces.Box(-1.0, 1.0, (3,), _F32), spaces.Box(-1.0, 1.0, (2,), _F32)],
        None,
    ),
}


@pytest.mark.alternate_planes
@pytest.mark.parametrize("case", list(SPACE_MISMATCHES))
def test_differing_spaces_raise_what_sync_and_async_raise(case):
    mode, observation_spaces, action_spaces = SPACE_MISMATCHES[case]
    kwargs = [
        {
            "observation_space": observation_spaces[min(i, 1)] if observation_spaces else "box_f32",
            "action_space": action_spaces[min(i, 1)] if action_spaces else "discrete",
        }
        for i in range(3)
    ]
    env_fns = [functools.partial(space_env, env_id=i, **kwargs[i]) for i in range(3)]
    raised = {}
    for kind in (SyncVectorEnv, AsyncVectorEnv, RemoteVectorEnv):
        started = time.monotonic()
        with pytest.raises(Exception) as caught:
            kind(env_fns, observation_mode=copy.deepcopy(mode))
        raised[kind.__name__] = (type(caught.value), str(caught.value), time.monotonic() - started)
    sync_type, sync_text, _ = raised["SyncVectorEnv"]
    remote_type, remote_text, elapsed = raised["RemoteVectorEnv"]
    assert remote_type is sync_type, raised
    if GYMNASIUM_VERSION >= (1, 4):  # (before, AsyncVectorEnv raised RuntimeError where SyncVectorEnv asserted)
        assert raised["AsyncVectorEnv"][0] is sync_type, raised
    expected_start = re.split(r"=|actual", sync_text.replace("SyncVectorEnv(", "RemoteVectorEnv("))[0]
    assert remote_text.startswith(expected_start), (remote_text, sync_text)
    assert elapsed < 5, f"raised after {elapsed:.1f} s"


# ---------------------------------------------------------------------------------------------------
# seeds


@pytest.mark.parametrize("num_clients", [1, 2, 4])
def test_seeding(num_clients):
    with env_pair(fns(4, info_kind="rich"), num_clients=num_clients) as (sync, remote):
        # an int seeds slot i with seed + i
        for seed in (0, 17, 2**31):
            same_result(sync.reset(seed=seed), remote.reset(seed=seed), f"reset(seed={seed})")
            assert remote.np_random_seed == tuple(seed + i for i in range(4))
            assert_same(sync.np_random_seed, remote.np_random_seed, "np_random_seed")
        # a list (or tuple) of seeds; None entries keep the env's generator going
        for seeds in ([5, None, 7, None], [None, None, None, 3], (9, 8, 7, 6), [None] * 4):
            same_result(sync.reset(seed=seeds), remote.reset(seed=seeds), f"reset(seed={seeds})")
            assert_same(sync.np_random_seed, remote.np_random_seed, f"np_random_seed after {seeds}")
            same_result(sync.step(np.array([0, 1, 2, 0])), remote.step(np.array([0, 1, 2, 0])), f"step after {seeds}")
        for a, b in zip(sync.np_random, remote.np_random, strict=True):
            assert type(a) is type(b)
            assert a.bit_generator.state == b.bit_generator.state
        # wrong-length seed lists: same error type and text
        for seeds in ([1, 2, 3], [1, 2, 3, 4, 5], [], [None] * 3, np.int64(3)):
            with pytest.raises(Exception) as sync_error:
                sync.reset(seed=seeds)
            with pytest.raises(Exception) as remote_error:
                remote.reset(seed=seeds)
            assert type(remote_error.value) is type(sync_error.value), (seeds, sync_error.value, remote_error.value)
            assert str(remote_error.value) == str(sync_error.value)
        # both still work, in step
        same_result(sync.reset(seed=1), remote.reset(seed=1), "reset after errors")
        same_result(sync.step(np.array([2, 2, 1, 0])), remote.step(np.array([2, 2, 1, 0])), "step after errors")


def seeded_spaces_env(env_id: str, seed: int, index: int) -> gym.Env:
    """A registered env whose action and observation spaces are seeded, as training scripts do."""
    env = gym.make(env_id)
    env.action_space.seed(seed + index)
    env.observation_space.seed(seed + 100 + index)
    return env


def seeded_space_env(seed: int, index: int, **kwargs: Any) -> gym.Env:
    env = SpaceEnv(env_id=index, **kwargs)
    env.action_space.seed(seed + index)
    env.observation_space.seed(seed + 100 + index)
    return env


SEEDED_ENVS = {
    **{
        env_id: functools.partial(seeded_spaces_env, env_id)
        for env_id in (
            "CartPole-v1",
            "Pendulum-v1",
            "Acrobot-v1",
            "MountainCarContinuous-v0",
            "Blackjack-v1",
            "FrozenLake-v1",
        )
    },
    "nested_spaces": functools.partial(seeded_space_env, observation_space="dict_of_tuple_of_box", action_space="dict"),
    "tuple_spaces": functools.partial(seeded_space_env, observation_space="tuple", action_space="tuple"),
}


@pytest.mark.alternate_planes
@pytest.mark.parametrize("name", list(SEEDED_ENVS))
def test_seeded_spaces_sample_as_in_sync(name):
    """Spaces seeded inside the env functions sample what SyncVectorEnv's spaces sample."""
    env_fns = [functools.partial(SEEDED_ENVS[name], 7, index) for index in range(3)]
    sync = SyncVectorEnv(env_fns)
    remotes = [RemoteVectorEnv(env_fns, num_clients=count) for count in (1, 2)]
    try:
        for attribute in ("action_space", "single_action_space", "observation_space", "single_observation_space"):
            expected = [getattr(sync, attribute).sample() for _ in range(3)]
            for remote in remotes:
                got = [getattr(remote, attribute).sample() for _ in range(3)]
                assert data_equivalence(expected, got), (attribute, expected, got)
    finally:
        sync.close()
        for remote in remotes:
            remote.close()


def test_unseeded_spaces_sample_differently():
    """Without a seed, each vector env's spaces start from fresh entropy, as in SyncVectorEnv."""
    env_fns = [functools.partial(gym.make, "CartPole-v1") for _ in range(2)]
    first, second = RemoteVectorEnv(env_fns, num_clients=1), RemoteVectorEnv(env_fns, num_clients=1)
    try:
        samples = [tuple(env.action_space.sample() for _ in range(32)) for env in (first, second)]
        assert not data_equivalence(samples[0], samples[1])
    finally:
        first.close()
        second.close()


def test_reset_passes_options_none_as_sync_does():
    """``reset()`` without options calls ``env.reset(seed=..., options=None)``: envs requiring it work."""
    with env_pair([OptionsRequiredEnv] * 3, num_clients=2) as (sync, remote):
        same_result(sync.reset(seed=4), remote.reset(seed=4), "reset(seed=4)")
        same_result(sync.reset(), remote.reset(), "reset()")


def test_unseeded_reset_has_the_same_structure():
    """reset() without seeds draws fresh entropy: compare only types, dtypes and shapes."""
    with env_pair(fns(3, observation_space="dict", info_kind="rich"), num_clients=2) as (sync, remote):
        sync_obs, sync_info = sync.reset()
        remote_obs, remote_info = remote.reset()
        for key in sync_obs:
            assert sync_obs[key].dtype == remote_obs[key].dtype and sync_obs[key].shape == remote_obs[key].shape
        for key in ("where", "steps", "ratio", "np_bool", "arr_f32", "nested"):
            assert type(sync_info[key]) is type(remote_info[key]), key
            assert sync_info[key].dtype == remote_info[key].dtype if isinstance(sync_info[key], np.ndarray) else True
            assert_same(sync_info[f"_{key}"], remote_info[f"_{key}"], f"infos['_{key}']")
        assert_same(sync_info["steps"], remote_info["steps"], "infos['steps']")
        assert all(type(seed) is int for seed in remote.np_random_seed)
        assert len(set(remote.np_random_seed)) == 3


# ---------------------------------------------------------------------------------------------------
# reset_mask errors


BAD_MASKS = {
    "none": lambda n: None,
    "list": lambda n: [True] * n,
    "tuple": lambda n: (True,) * n,
    "too_long": lambda n: np.ones(n + 1, dtype=np.bool_),
    "too_short": lambda n: np.ones(n - 1, dtype=np.bool_),
    "two_dims": lambda n: np.ones((n, 1), dtype=np.bool_),
    "int_dtype": lambda n: np.ones(n, dtype=np.int64),
    "float_dtype": lambda n: np.ones(n, dtype=np.float32),
    "all_false": lambda n: np.zeros(n, dtype=np.bool_),
}


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_reset_mask_errors(mode):
    with env_pair(fns(3), autoreset_mode=mode, num_clients=2) as (sync, remote):
        same_result(sync.reset(seed=4), remote.reset(seed=4), "reset")
        for name, bad_mask in BAD_MASKS.items():
            sync_options = {"reset_mask": bad_mask(3), "other": 1}
            remote_options = {"reset_mask": bad_mask(3), "other": 1}
            with pytest.raises(Exception) as sync_error:
                sync.reset(options=sync_options)
            with pytest.raises(Exception) as remote_error:
                remote.reset(options=remote_options)
            assert type(remote_error.value) is type(sync_error.value), (name, sync_error.value, remote_error.value)
            assert str(remote_error.value) == str(sync_error.value), name
            assert_same(sync_options, remote_options, f"{name}: the options dict after the failed reset")
        # the envs are untouched and go on alike
        actions = np.array([1, 0, 2])
        for t in range(40):
            sync_result, remote_result = sync.step(actions), remote.step(actions)
            same_result(sync_result, remote_result, f"step {t} after the mask errors")
            done = np.logical_or(sync_result[2], sync_result[3])
            if done.any():
                same_result(
                    sync.reset(options={"reset_mask": done}),
                    remote.reset(options={"reset_mask": done}),
                    f"masked reset at step {t}",
                )


def test_disabled_mode_refuses_to_step_a_finished_env():
    env_fns = fns(2, max_steps=1, terminate_prob=0.0)
    with env_pair(env_fns, autoreset_mode=AutoresetMode.DISABLED, num_clients=1) as (sync, remote):
        sync.reset(seed=0)
        remote.reset(seed=0)
        same_result(sync.step(np.array([0, 0])), remote.step(np.array([0, 0])), "step")
        with pytest.raises(AssertionError):
            sync.step(np.array([0, 0]))
        with pytest.raises(AssertionError):
            remote.step(np.array([0, 0]))


# ---------------------------------------------------------------------------------------------------
# call, get_attr, set_attr, render, wrappers


@pytest.mark.parametrize("num_clients", [1, 2, 4])
def test_call_get_attr_set_attr_render(num_clients):
    env_fns = [
        functools.partial(
            make_wrapped_env, env_id=i, render_mode="rgb_array", observation_space="dict", max_steps=5, info_kind="rich"
        )
        for i in range(4)
    ]
    with env_pair(env_fns, num_clients=num_clients) as (sync, remote):
        assert_same_construction(sync, remote)
        assert remote.render_mode == "rgb_array"
        same_result(sync.reset(seed=11), remote.reset(seed=11), "reset")
        for t in range(12):  # some episodes end: RecordEpisodeStatistics adds "episode" infos
            actions = np.array([t % 3, 1, 2, 0])
            same_result(sync.step(actions), remote.step(actions), f"step {t}", loose=WALL_CLOCK)

        def same(what: str, sync_value: Any, remote_value: Any) -> None:
            assert type(remote_value) is tuple, what
            assert_same(sync_value, remote_value, what)

        same("render()", sync.render(), remote.render())
        same("call('render')", sync.call("render"), remote.call("render"))
        same(
            "call('scaled', 2.0, factor=3.0)",
            sync.call("scaled", 2.0, factor=3.0),
            remote.call("scaled", 2.0, factor=3.0),
        )
        same(
            "call('describe', verbose=True)", sync.call("describe", verbose=True), remote.call("describe", verbose=True)
        )
        # attributes of the inner env, reached through the wrappers
        for name in (
            "custom_attr",
            "steps",
            "env_id",
            "scale",
            "max_steps",
            "episodes",
            "info_kind",
            "render_mode",
            "metadata",
            "observation_space",
            "action_space",
            "spec",
            "np_random_seed",
            "episode_count",
            "last_obs",
        ):
            same(f"get_attr({name!r})", sync_attr(sync.get_attr, name), remote.get_attr(name))
            same(f"call({name!r})", sync_attr(sync.call, name), remote.call(name))
        same("np_random_seed", sync.np_random_seed, remote.np_random_seed)

        # set_attr: one value for all, a list, a tuple, an array (one value for all)
        sync.set_attr("scale", 2.5)
        remote.set_attr("scale", 2.5)
        same("scale after set_attr(2.5)", sync.get_attr("scale"), remote.get_attr("scale"))
        sync.set_attr("custom_attr", ["a", "b", "c", "d"])
        remote.set_attr("custom_attr", ["a", "b", "c", "d"])
        same("custom_attr after set_attr(list)", sync.get_attr("custom_attr"), remote.get_attr("custom_attr"))
        sync.set_attr("scale", (1.0, np.float32(2.0), 3, np.int64(4)))
        remote.set_attr("scale", (1.0, np.float32(2.0), 3, np.int64(4)))
        same("scale after set_attr(tuple)", sync.get_attr("scale"), remote.get_attr("scale"))
        sync.set_attr("vector", np.arange(4, dtype=np.int16))
        remote.set_attr("vector", np.arange(4, dtype=np.int16))
        same("vector after set_attr(array)", sync.get_attr("vector"), remote.get_attr("vector"))
        sync.set_attr("nested", {"a": [1, 2], "b": None})
        remote.set_attr("nested", {"a": [1, 2], "b": None})
        same("nested after set_attr(dict)", sync.get_attr("nested"), remote.get_attr("nested"))
        # the inner env's attribute was set (not a new one on the outer wrapper)
        same("describe after set_attr", sync.call("describe"), remote.call("describe"))
        same("call('scaled', 1.0) after set_attr", sync.call("scaled", 1.0), remote.call("scaled", 1.0))
        # wrong lengths: the same error type and text
        for values in ([1, 2, 3], (1, 2, 3, 4, 5), []):
            with pytest.raises(Exception) as sync_error:
                sync.set_attr("scale", values)
            with pytest.raises(Exception) as remote_error:
                remote.set_attr("scale", values)
            assert type(remote_error.value) is type(sync_error.value)
            assert str(remote_error.value) == str(sync_error.value)
        same("scale after the failed set_attr", sync.get_attr("scale"), remote.get_attr("scale"))
        # stepping goes on alike with the new attributes (render frames track the steps)
        for t in range(5):
            actions = np.array([0, 1, 2, t % 3])
            same_result(sync.step(actions), remote.step(actions), f"step {t} after set_attr", loose=WALL_CLOCK)
        same("render() after steps", sync.render(), remote.render())
        same("episode_count", sync.get_attr("episode_count"), remote.get_attr("episode_count"))


def test_render_mode_none():
    with env_pair(fns(2), num_clients=2) as (sync, remote):
        assert remote.render_mode is None and sync.render_mode is None
        sync.reset(seed=0)
        remote.reset(seed=0)
        assert_same(sync.render(), remote.render(), "render()")


# ---------------------------------------------------------------------------------------------------
# the real CartPole


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("record_stats", [False, True], ids=["plain", "record_episode_statistics"])
def test_cartpole(record_stats, mode):
    env_fns = [functools.partial(make_cartpole, record_stats=record_stats) for _ in range(4)]
    counts = run_pair(
        env_fns,
        autoreset_mode=mode,
        steps=400,
        seeds=(0, 42),
        num_clients=[1, 2, 4][MODES.index(mode)],
        copy_obs=not record_stats,
        # RecordEpisodeStatistics' "t" is a wall-clock time: only its type and mask are compared
        loose=WALL_CLOCK,
    )
    assert counts["terminations"] >= 20, counts
    with env_pair(env_fns, autoreset_mode=mode, num_clients=2) as (sync, remote):
        same_result(sync.reset(seed=3), remote.reset(seed=3), "reset(seed=3)")
        for name in ("spec", "render_mode", "metadata", "np_random_seed"):
            assert_same(sync_attr(sync.get_attr, name), remote.get_attr(name), f"get_attr({name!r})")


def sync_attr(get: Callable[[str], tuple], name: str) -> tuple:
    """``get(name)`` of a SyncVectorEnv, as a RemoteVectorEnv's clients have it. Before Gymnasium 1.4,
    SyncVectorEnv wrote its ``autoreset_mode`` into its first env's ``metadata``, which is the env class's own
    dict, so every env of the class shows it; the clients' envs, in other processes, are not touched."""
    values = get(name)
    if name != "metadata" or GYMNASIUM_VERSION >= (1, 4):
        return values
    return tuple({key: value for key, value in metadata.items() if key != "autoreset_mode"} for metadata in values)


# ---------------------------------------------------------------------------------------------------
# actions and observations in the loose forms users and real envs give


ACTION_FORMS = {
    # id: (action space name, batched actions for 3 envs)
    "discrete-sampled": ("discrete", lambda: np.array([0, 1, 2])),
    "discrete-list": ("discrete", lambda: [0, 1, 2]),
    "discrete-int32": ("discrete", lambda: np.array([2, 1, 0], dtype=np.int32)),
    "box-sampled": ("box", lambda: np.array([[0.1, 0.2], [0.3, -0.4], [0.5, 0.6]], dtype=np.float32)),
    "box-float64": ("box", lambda: np.array([[0.1, 0.2], [0.3, -0.4], [0.5, 0.6]])),
    "box-list": ("box", lambda: [[0.1, 0.2], [0.3, -0.4], [0.5, 0.6]]),
    "multi_discrete-list": ("multi_discrete", lambda: [[0, -1, 5], [1, 0, 6], [2, -1, 8]]),
    "dict-lists": ("dict", lambda: {"move": [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], "fire": [0, 1, 1]}),
    "tuple-lists": ("tuple", lambda: ([0, 1, 2], [[0, 1], [1, 0], [1, 1]])),
}


@pytest.mark.alternate_planes
@pytest.mark.parametrize("form", list(ACTION_FORMS))
def test_actions_reach_the_envs_as_in_sync(form):
    """Each env gets the item of the batched actions SyncVectorEnv would give it: same type, dtype, value."""
    from tests.envs import ActionEchoEnv

    space, make_actions = ACTION_FORMS[form]
    env_fns = [functools.partial(ActionEchoEnv, space) for _ in range(3)]
    with env_pair(env_fns, num_clients=2) as (sync, remote):
        same_result(sync.reset(seed=2), remote.reset(seed=2), "reset")
        for t in range(3):
            actions = make_actions()
            same_result(sync.step(actions), remote.step(copy.deepcopy(actions)), f"{form}: step {t}")


def test_pendulum_with_float64_actions():
    """A float64 policy output for Pendulum's float32 action space: the same dynamics as SyncVectorEnv."""
    env_fns = [functools.partial(gym.make, "Pendulum-v1") for _ in range(3)]
    with env_pair(env_fns, num_clients=1) as (sync, remote):
        same_result(sync.reset(seed=9), remote.reset(seed=9), "reset")
        rng = np.random.default_rng(0)
        for t in range(50):
            actions = rng.uniform(-2.0, 2.0, (3, 1))  # float64
            same_result(sync.step(actions), remote.step(actions.copy()), f"step {t}")


@pytest.mark.alternate_planes
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=["next_step", "same_step"])
@pytest.mark.parametrize("kind", ["box_float64", "box_list", "discrete_int", "multi_discrete_tuple", "dict_mixed"])
def test_loose_observations(kind, mode):
    """Observations not of the space's exact type: batched alike, and final_obs kept as the env gave it."""
    from tests.envs import LooseObsEnv

    run_pair([functools.partial(LooseObsEnv, kind) for _ in range(3)], autoreset_mode=mode, steps=60, num_clients=2)


@pytest.mark.parametrize("copy_obs", [True, False], ids=["copy", "nocopy"])
def test_observations_large_enough_to_travel_without_copying(copy_obs):
    # 2 envs of 640 KB observations per client: RESULT frames of 1.25 MiB, sent zero-copy
    large = spaces.Box(0, 255, (640, 1024), dtype=np.uint8)
    assert 2 * large.shape[0] * large.shape[1] >= zeromq.ZERO_COPY_BYTES
    run_pair(
        fns(4, observation_space=large, info_kind="sparse", max_steps=6, terminate_prob=0.1),
        autoreset_mode=AutoresetMode.NEXT_STEP,
        steps=20,
        seeds=(3,),
        copy_obs=copy_obs,
        num_clients=2,
    )
