"""The fleet's figures for Prometheus (gym_remote/metrics.py): a real endpoint, scraped over loopback HTTP."""

from __future__ import annotations

import urllib.request

import gymnasium as gym
import pytest

from gym_remote import RemoteVectorEnv
from tests.helpers import wait_until

parser = pytest.importorskip("prometheus_client.parser")


def scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {family.name: family.samples for family in parser.text_string_to_metric_families(text)}


def value(samples: list, **labels: str) -> float:
    found = [sample.value for sample in samples if all(sample.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (labels, samples)
    return found[0]


def test_the_endpoint_serves_the_fleets_figures_as_the_learner_steps(stack):
    envs = RemoteVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_clients=2)
    stack.callback(envs.close)
    port = envs.serve_metrics()
    envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(300):
        envs.step(envs.action_space.sample())
    scraped = scrape(port)
    assert value(scraped["gym_remote_slots"], server="gym_remote") == 4
    assert value(scraped["gym_remote_slots_served"]) == 4
    assert value(scraped["gym_remote_clients_joined"]) == 2  # (the family of gym_remote_clients_joined_total)
    wait_until(
        lambda: (envs.step(envs.action_space.sample()), scrape(port))[1]["gym_remote_episodes"][0].value > 0,
        20,
        "the published status to count episodes",
    )
    scraped = scrape(port)
    steps = {sample.labels["slot"]: sample.value for sample in scraped["gym_remote_env_steps"]}
    assert sorted(steps) == ["0", "1", "2", "3"] and all(count >= 300 for count in steps.values()), steps
    assert {sample.labels["client"] for sample in scraped["gym_remote_env_steps"]} == {"local-0", "local-1"}
    returns = [sample.value for sample in scraped["gym_remote_episode_return_mean"]]
    assert returns and all(5 < mean < 200 for mean in returns), returns
    stats = {sample.labels["stat"] for sample in scraped["gym_remote_step_latency_seconds"]}
    assert stats == {"median", "worst"}
    envs.close()
    with pytest.raises(OSError):  # the endpoint closed with the vector env
        scrape(port)
