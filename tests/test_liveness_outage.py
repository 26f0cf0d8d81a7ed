"""Network outages between a learner and a client, made with a TCP relay on 127.0.0.1 that can be paused.

A paused relay reads, writes and accepts nothing, but keeps its connections open: what the peers send
waits in the kernel's buffers, as in a stall where the connection stays up. An outage clearly shorter
than ``liveness_timeout`` keeps the client a member; one clearly longer gets it declared lost, and it
rejoins as a new session once the relay goes on.
"""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np

from gym_remote import RemoteVectorEnv
from gym_remote.conformance.relay import Relay
from tests.envs import make_cartpole
from tests.helpers import ThreadClient, cartpole_server

LIVENESS = 2.0
"""liveness_timeout of the server and of the client, in seconds."""


def served_through_a_relay(stack: contextlib.ExitStack) -> tuple[RemoteVectorEnv, Relay, ThreadClient]:
    """A 1-slot CartPole server and an EnvClient (in a thread) that reaches it through a relay, after a reset.

    Teardown (by ``stack``): the client stops, the relay closes, the server closes.
    """
    envs = cartpole_server(stack, 1, liveness_timeout=LIVENESS)
    relay = Relay.to(envs.address)
    stack.callback(relay.close)
    client = ThreadClient(relay.endpoint, [make_cartpole], name="behind-relay", liveness_timeout=LIVENESS)
    stack.callback(client.stop)
    envs.reset(seed=0)
    return envs, relay, client


def step(envs: RemoteVectorEnv) -> tuple:
    return envs.step(np.zeros(1, dtype=np.int64))


def test_outage_shorter_than_the_liveness_timeout_keeps_the_client(stack):
    envs, relay, client = served_through_a_relay(stack)
    before = envs.stats()[0]
    outage = 0.3 * LIVENESS

    relay.pause()  # while idle: only heartbeats wait
    time.sleep(outage)
    relay.resume()
    for _ in range(3):
        assert "client_lost" not in step(envs)[4]

    relay.pause()  # with a step in flight: its command and its result wait
    resume = threading.Timer(outage, relay.resume)
    resume.start()
    try:
        started = time.monotonic()
        infos = step(envs)[4]
        elapsed = time.monotonic() - started
    finally:
        resume.cancel()
        resume.join(5)
        relay.resume()
    assert "client_lost" not in infos, infos
    assert elapsed >= outage - 0.05, f"the step took {elapsed:.2f} s: it did not wait for the relay"
    for _ in range(3):
        assert "client_lost" not in step(envs)[4]

    after = envs.stats()[0]
    assert (after["session"], after["epoch"], after["rejoins"]) == (before["session"], 1, 0)
    assert client.client.session == before["session"] and not client.done
    assert relay.connections == 1, "the client connected again"


def test_outage_longer_than_the_liveness_timeout_loses_the_client_and_it_rejoins(stack):
    envs, relay, client = served_through_a_relay(stack)
    before = envs.stats()[0]

    relay.pause()
    time.sleep(2 * LIVENESS)
    relay.resume()
    _, rewards, terminations, truncations, infos = step(envs)
    assert infos.get("client_lost", np.array([False])).tolist() == [True], infos
    assert infos["_client_lost"].tolist() == [True]
    assert truncations.tolist() == [True] and terminations.tolist() == [False] and rewards.tolist() == [0.0]

    # its own side of the connection timed out too: it rejoins as a new session; this step waits for it
    _, _, _, _, infos = step(envs)
    assert "client_lost" not in infos, infos
    after = envs.stats()[0]
    assert (after["client"], after["epoch"], after["rejoins"]) == ("behind-relay", 2, 1)
    assert after["session"] != before["session"] and after["session"] == client.client.session
    for _ in range(3):
        assert "client_lost" not in step(envs)[4]
