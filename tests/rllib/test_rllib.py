"""RLlib's new API stack on RemoteVectorEnv through the config alone: the configs of docs/tutorials/rllib.md.

Each config of the tutorial trains one PPO iteration (a small batch and model, a fixed seed) and must give
exactly what the same config gives on Gymnasium's SyncVectorEnv of the same env: the same episodes (returns,
lengths, how many), the same env steps and the same losses, which any wrong transition would change. The env
runners: the local one and one remote (a Ray actor); the clients: local ones each env runner starts, and
``gym-remote client`` processes the test starts with the tutorial's command lines. RLlib samples assuming
next-step autoreset, so any other mode is refused before a client starts.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gymnasium as gym
import pytest
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.tune.registry import register_env

from tests.helpers import child_pids, free_tcp_address, gym_remote, is_local_client

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "rllib.md"
TUTORIAL_ADDRESS = "tcp://127.0.0.1:5555"  # the tutorial's external clients' address; the tests use a free port

SAMPLED = [
    "episode_return_mean",
    "episode_return_min",
    "episode_return_max",
    "episode_len_mean",
    "num_episodes",
    "num_env_steps_sampled",
]
LEARNED = ["total_loss", "policy_loss", "vf_loss", "entropy"]
BATCH = 128


def tutorial_blocks(language: str) -> list[str]:
    """The code blocks of docs/tutorials/rllib.md in ``language``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", TUTORIAL.read_text(), flags=re.MULTILINE | re.DOTALL)


def tutorial_config(num_env_runners: int, *, external: bool = False, address: str = TUTORIAL_ADDRESS):
    """The tutorial's config (the one for external clients, or the one with local clients and
    ``num_env_runners``), its address replaced by ``address``."""
    blocks = [block for block in tutorial_blocks("python") if "config = (" in block]
    chosen = [
        block for block in blocks if ('"bind"' in block) == external and f"num_env_runners={num_env_runners}," in block
    ]
    assert len(chosen) == 1, f"the tutorial should have one such config, has {len(chosen)}: {chosen}"
    namespace: dict = {}
    exec(chosen[0].replace(TUTORIAL_ADDRESS, address), namespace)
    config = namespace["config"]
    assert isinstance(config, AlgorithmConfig)
    return config


def small(config: AlgorithmConfig) -> AlgorithmConfig:
    """``config`` with one small batch, one epoch, a small model and a fixed seed."""
    return (
        config.training(train_batch_size_per_learner=BATCH, minibatch_size=64, num_epochs=1)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[8], head_fcnet_hiddens=[]))
        .debugging(seed=7)
    )


def on_sync_vector_env(config: AlgorithmConfig, env_id: str) -> AlgorithmConfig:
    """``config`` with Gymnasium's SyncVectorEnv of ``env_id`` (RLlib's default vectorization) as its env."""
    twin = config.copy(copy_frozen=False)
    twin.env_config = dict(config.env_config.get("env_kwargs", {}))
    return twin.environment(env_id).env_runners(gym_env_vectorize_mode="sync")


def one_iteration(config: AlgorithmConfig) -> tuple[dict, list[str]]:
    """Build the algorithm, train it once, stop it: what it sampled and learned (``SAMPLED``, ``LEARNED``), and
    the class of the vector env each env runner sampled from."""
    algo = config.build_algo()
    try:
        result = algo.train()
        assert algo.env_runner_group is not None
        vector_envs = algo.env_runner_group.foreach_env_runner(
            lambda runner: type(runner.env.unwrapped).__name__ if runner.env is not None else None,
            local_env_runner=True,
        )
    finally:
        algo.stop()
    sampled, learned = result["env_runners"], result["learners"]["default_policy"]
    figures = {key: sampled[key] for key in SAMPLED} | {key: float(learned[key]) for key in LEARNED}
    return figures, [name for name in vector_envs if name is not None]


def assert_trains_as_sync(config: AlgorithmConfig, env_id: str) -> dict:
    """One iteration of ``config`` samples from RemoteVectorEnvs and gives exactly what it gives on SyncVectorEnv."""
    remote, remote_envs = one_iteration(small(config))
    sync, sync_envs = one_iteration(small(on_sync_vector_env(config, env_id)))
    expected_envs = max(config.num_env_runners or 0, 1)  # (the local env runner has no env beside remote ones)
    assert remote_envs == ["RemoteVectorEnv"] * expected_envs and sync_envs == ["SyncVectorEnv"] * expected_envs
    assert remote["num_env_steps_sampled"] >= BATCH and remote["num_episodes"] > 0
    assert remote == sync
    return remote


@pytest.mark.parametrize("num_env_runners", [0, 1])
def test_ppo_on_local_clients_trains_as_on_sync_vector_env(local_ray, num_env_runners):
    before = child_pids(is_local_client)
    assert_trains_as_sync(tutorial_config(num_env_runners), "CartPole-v1")
    assert child_pids(is_local_client) <= before  # the local env runner's clients ended with the algorithm


def test_ppo_on_external_clients_trains_as_on_sync_vector_env(local_ray, reaper, tmp_path):
    address = free_tcp_address()
    commands = [shlex.split(line) for line in tutorial_blocks("bash")[-1].splitlines() if line.strip()]
    assert len(commands) == 2 and all(command[:3] == ["gym-remote", "client", TUTORIAL_ADDRESS] for command in commands)
    clients = [
        gym_remote(reaper, tmp_path, f"client{number}", "client", address, *command[3:])
        for number, command in enumerate(commands)
    ]
    assert_trains_as_sync(tutorial_config(0, external=True, address=address), "CartPole-v1")
    for client in clients:  # the algorithm stopped: its server told the clients the run is over
        assert client.wait(30) == 0, client


class _Collected(logging.Handler):
    def __init__(self, messages: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def rllib_errors() -> Iterator[list[str]]:
    """The messages RLlib logs at ERROR while the block runs."""
    messages: list[str] = []
    handler = _Collected(messages)
    logger = logging.getLogger("ray.rllib")
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


REFUSED = (
    r"RLlib \(ray\.rllib\.[\w.]+\) is building a RemoteVectorEnv with autoreset_mode='{}'.*"
    r"pass autoreset_mode='NextStep'"
)
"""The refusal's message, for a mode (``REFUSED.format(mode)``)."""


@pytest.mark.parametrize("autoreset_mode", ["SameStep", "Disabled"])
def test_another_autoreset_mode_is_refused_before_any_client_starts(local_ray, autoreset_mode):
    config = small(tutorial_config(0))
    config.environment(env_config={"autoreset_mode": autoreset_mode})
    before = child_pids(is_local_client)
    with pytest.raises(ValueError, match=REFUSED.format(autoreset_mode)):
        config.build_algo()
    assert child_pids(is_local_client) == before


def test_an_env_creator_that_makes_the_id_is_checked_too(local_ray):
    def creator(context):
        return gym.make_vec(
            "gym_remote/RemoteVectorEnv-v0",
            num_envs=context["num_envs"],
            env_id="CartPole-v1",
            autoreset_mode="SameStep",
        )

    register_env("gym_remote_same_step", creator)
    config = small(tutorial_config(0))
    config.env_config = {}
    config.environment("gym_remote_same_step")
    with pytest.raises(ValueError, match=REFUSED.format("SameStep")):
        config.build_algo()


@pytest.mark.parametrize("restart_failed_env_runners", [True, False], ids=["default", "no-restarts"])
def test_a_remote_env_runner_refuses_another_autoreset_mode(local_ray, restart_failed_env_runners):
    """In an env runner actor the error ends the actor: RLlib logs it, then, with its default fault tolerance, fails
    on its own (Ray 2.60: an IndexError finding the env's spaces); without restarts it raises the error itself."""
    config = small(tutorial_config(1)).fault_tolerance(restart_failed_env_runners=restart_failed_env_runners)
    config.environment(env_config={"autoreset_mode": "SameStep"})
    with rllib_errors() as logged, pytest.raises(Exception) as raised:
        config.build_algo()
    if restart_failed_env_runners:
        assert any(re.search(REFUSED.format("SameStep"), message, re.DOTALL) for message in logged), logged
    else:
        assert re.search(REFUSED.format("SameStep"), str(raised.value), re.DOTALL), raised.value
