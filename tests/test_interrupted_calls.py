"""An interrupted call leaves nothing behind: a KeyboardInterrupt (here from SIGALRM) while a call waits
for its replies ends that call, and the next call gets only its own results.

The envs (``tests.envs.Napper``) sleep on demand, so that the interrupt comes while the learner
waits; their late replies then arrive during the next call, where they must be dropped.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from gymnasium.error import NoAsyncCallError

from gym_remote import RemoteTimeoutError, RemoteVectorEnv, protocol
from gym_remote.errors import ProtocolError
from gym_remote.links import shared
from gym_remote.protocol import Kind
from tests.envs import Counter, Napper
from tests.envs.faults import make_action_digest
from tests.helpers import ThreadClient, call_interrupted_at, interrupts_at_random_moments

pytestmark = pytest.mark.timeout(90, method="thread")  # the tests use SIGALRM themselves

INTERRUPT_AFTER = 0.3  # seconds into a wait; the envs nap for Napper.NAP_SECONDS (1 s)


@contextlib.contextmanager
def interrupt_after(seconds: float) -> Iterator[None]:
    """Raise KeyboardInterrupt in the main thread after ``seconds``, as Ctrl-C would."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def random_interrupts(rng: np.random.Generator) -> Iterator[Callable[[Callable[[], Any], float], bool]]:
    """Yields ``cut_short(call, most)``: ``call()`` with a KeyboardInterrupt raised a random 10 µs to ``most`` s
    into it, as Ctrl-C would (never once it returned); True if it was cut short."""
    armed = False

    def interrupt(signum: int, frame: object) -> None:
        if armed:
            raise KeyboardInterrupt

    def cut_short(call: Callable[[], Any], most: float) -> bool:
        nonlocal armed
        try:
            armed = True  # inside the try: the alarm may come before the call is even made
            signal.setitimer(signal.ITIMER_REAL, float(rng.uniform(1e-5, most)))
            call()
            armed = False
            return False
        except KeyboardInterrupt:
            return True
        finally:
            armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        yield cut_short
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(params=[1, 2], ids=["1-client", "2-clients"])
def envs(request) -> Iterator[RemoteVectorEnv]:
    vector = RemoteVectorEnv([Napper] * 2, num_clients=request.param, autoreset_mode="SameStep", timeout=30)
    try:
        yield vector
    finally:
        vector.close()


def assert_nothing_awaited(envs: RemoteVectorEnv) -> None:
    """No command of the interrupted call still awaits replies (they would land in a later call)."""
    assert not envs._server._awaited, f"replies still awaited: {envs._server._awaited}"


def assert_second_step_is_its_own(envs: RemoteVectorEnv, steps_before: int) -> None:
    """The next step returns its own results: the count after both steps, no episode end, no infos."""
    observations, rewards, terminations, truncations, infos = envs.step(np.array([0, 0]))
    assert observations[:, 0].tolist() == [steps_before + 1] * 2, observations
    assert rewards.tolist() == [0.0, 0.0] and not terminations.any() and not truncations.any()
    assert "final_obs" not in infos and "napped" not in infos, infos


def test_an_interrupted_step_leaves_no_results_for_the_next(envs):
    envs.reset(seed=0)
    with pytest.raises(KeyboardInterrupt), interrupt_after(INTERRUPT_AFTER):
        envs.step(np.array([1, 1]))  # both envs nap, then end their episodes (SAME_STEP: a final_obs)
    assert_nothing_awaited(envs)
    # The napping step ended the episodes in the clients, which reset them: the count restarts at 0.
    assert_second_step_is_its_own(envs, steps_before=0)
    assert_second_step_is_its_own(envs, steps_before=1)


def test_an_interrupted_step_wait_leaves_no_results_for_the_next(envs):
    envs.reset(seed=0)
    envs.step_async(np.array([0, 1]))  # slot 1 naps
    with pytest.raises(KeyboardInterrupt), interrupt_after(INTERRUPT_AFTER):
        envs.step_wait()
    assert_nothing_awaited(envs)
    observations, _, terminations, _, infos = envs.step(np.array([0, 0]))
    assert observations[:, 0].tolist() == [2, 1], observations  # slot 1 restarted after its nap ended it
    assert not terminations.any() and "final_obs" not in infos and "napped" not in infos, infos


def test_an_interrupted_reset_leaves_no_results_for_the_next_call(envs):
    envs.reset(seed=0)
    envs.step(np.array([0, 0]))
    with pytest.raises(KeyboardInterrupt), interrupt_after(INTERRUPT_AFTER):
        envs.reset(seed=1, options={"nap": True})
    assert_nothing_awaited(envs)
    observations, infos = envs.reset(seed=2)
    assert observations[:, 0].tolist() == [0, 0] and "napped_in_reset" not in infos, infos
    assert_second_step_is_its_own(envs, steps_before=0)


def test_an_interrupted_reset_wait_leaves_no_results_for_the_next_call(envs):
    envs.reset(seed=0)
    envs.reset_async(seed=1, options={"nap": True})
    with pytest.raises(KeyboardInterrupt), interrupt_after(INTERRUPT_AFTER):
        envs.reset_wait()
    assert_nothing_awaited(envs)
    assert_second_step_is_its_own(envs, steps_before=0)


def test_an_interrupted_call_leaves_no_results_for_the_next_call(envs):
    envs.reset(seed=0)
    envs.step(np.array([0, 0]))
    with pytest.raises(KeyboardInterrupt), interrupt_after(INTERRUPT_AFTER):
        envs.call("nap")
    assert_nothing_awaited(envs)
    assert envs.get_attr("steps") == (1, 1)
    assert_second_step_is_its_own(envs, steps_before=1)


def test_an_interrupted_recv_keeps_its_slots_in_flight():
    envs = RemoteVectorEnv([Napper] * 2, num_clients=2, autoreset_mode="SameStep", timeout=30, batch_size=2)
    try:
        envs.async_reset(seed=0)
        envs.recv()
        envs.send(np.array([1, 0]), np.array([0, 1]))  # slot 0 naps, slot 1 answers at once
        with pytest.raises(KeyboardInterrupt), interrupt_after(INTERRUPT_AFTER):
            envs.recv()
        # A later recv() returns both results, each once, as after a timeout.
        observations, rewards, terminations, _, infos = envs.recv()
        by_slot = dict(zip(infos["env_id"].tolist(), range(2), strict=True))
        assert sorted(by_slot) == [0, 1]
        assert bool(terminations[by_slot[0]]) and rewards[by_slot[0]] == 1.0
        assert observations[by_slot[1], 0] == 1 and not terminations[by_slot[1]]
        envs.send(np.array([0, 0]), np.array([0, 1]))
        observations, _, terminations, _, infos = envs.recv()
        assert sorted(infos["env_id"].tolist()) == [0, 1] and not terminations.any()
    finally:
        envs.close()


BIG_ACTION_BYTES = 32 << 20  # far more than a socket's buffers hold: a send to a stopped client blocks


def test_a_send_interrupted_mid_message_is_sent_whole_or_not_at_all():
    """Ctrl-C while the learner sends a large STEP to a client that reads nothing (it is stopped): the step
    raises KeyboardInterrupt, and once the client runs again it is still a member, the next step returns its
    result for the next action, and the env got the interrupted action whole or not at all."""
    env_fns = [functools.partial(make_action_digest, action_bytes=BIG_ACTION_BYTES)]
    envs = RemoteVectorEnv(env_fns, num_clients=1, timeout=30, liveness_timeout=10)
    try:
        envs.reset(seed=0)
        size = BIG_ACTION_BYTES

        def action(value: int) -> np.ndarray:
            return np.full((1, size), value, dtype=np.uint8)

        observations, _, _, _, _ = envs.step(action(1))
        assert observations[0].tolist() == [1, 1, 1, 1, size]
        before = envs.stats()[0]
        os.kill(before["pid"], signal.SIGSTOP)
        resume = threading.Timer(1.0, os.kill, (before["pid"], signal.SIGCONT))
        resume.start()
        try:
            started = time.monotonic()
            with pytest.raises(KeyboardInterrupt), interrupt_after(0.5):
                envs.step(action(2))  # the send blocks: the stopped client's socket buffer is full
            assert time.monotonic() - started < 5
        finally:
            resume.join(5)
            os.kill(before["pid"], signal.SIGCONT)
        observations, _, _, truncations, infos = envs.step(action(3))
        assert "client_lost" not in infos and not truncations.any(), infos
        steps, first, last, uniform, total = observations[0].tolist()
        assert (first, last, uniform) == (3, 3, 1), observations[0]  # the next action, whole
        # the interrupted action reached the env whole (steps 1, 2, 3) or not at all (steps 1, 3)
        assert (steps, total) in ((2, 4 * size), (3, 6 * size)), observations[0]
        after = envs.stats()[0]
        assert (after["pid"], after["session"], after["epoch"]) == (before["pid"], before["session"], 1)
        observations, _, _, _, infos = envs.step(action(4))
        assert "client_lost" not in infos and observations[0, 0] == steps + 1
    finally:
        envs.close()


def _reset_every_slot(envs: RemoteVectorEnv) -> None:
    """Reset every slot of a vector of partial batches and take every result."""
    envs.async_reset(seed=0)
    while True:
        try:
            envs.recv()
        except NoAsyncCallError:
            return


@pytest.mark.timeout(120, method="thread")
@pytest.mark.parametrize("batch_size", [1, 2], ids=["batches-of-1", "batches-of-2"])
@interrupts_at_random_moments()
def test_interrupted_recvs_never_lose_a_reply(batch_size):
    """recv() interrupted at random moments (microseconds to milliseconds in, while replies of 320 KB
    arrive), hundreds of times, each followed by uninterrupted recv() calls: these never hang (a result
    cut short is returned later, or its slot takes actions again, as the README says), no result comes
    twice, and every result is the one of the action last sent to its slot."""
    env_fns = [functools.partial(make_action_digest, action_bytes=8, padding=40_000)] * 2
    envs = RemoteVectorEnv(env_fns, num_clients=2, batch_size=batch_size, timeout=30)
    try:
        with random_interrupts(np.random.default_rng(0)) as cut_short:
            _reset_every_slot(envs)
            steps = [0, 0]  # the step count in each slot's last result
            value = interrupted = cycle = 0
            deadline = time.monotonic() + 12
            while (cycle < 2000 or interrupted < 100) and time.monotonic() < deadline:  # (a busy machine: more)
                cycle += 1
                value = value % 250 + 1
                envs.send(np.full((2, 8), value, dtype=np.uint8), np.array([0, 1]))
                results = []
                interrupted += cut_short(lambda: results.append(envs.recv()), 2e-3)  # noqa: B023 (called at once)
                while {0, 1} - {slot for result in results for slot in result[4]["env_id"].tolist()}:
                    try:
                        results.append(envs.recv(timeout=5))
                    except NoAsyncCallError:
                        break  # the rest were cut short: their slots take actions again
                    except RemoteTimeoutError as error:
                        pytest.fail(f"cycle {cycle}, after {interrupted} interrupted recv() calls: {error}")
                returned = [slot for result in results for slot in result[4]["env_id"].tolist()]
                assert sorted(set(returned)) == sorted(returned), f"cycle {cycle}: a result twice: {returned}"
                for observations, _, _, _, infos in results:
                    for row, slot in enumerate(infos["env_id"].tolist()):
                        count, first, last, uniform, _ = observations[row, :5].tolist()
                        assert (first, last, uniform) == (value, value, 1), (cycle, slot, observations[row, :5])
                        assert count > steps[slot], f"cycle {cycle}: slot {slot}'s step {count} came again"
                        steps[slot] = count
        assert interrupted >= 100, f"only {interrupted} of {cycle} recv() calls were interrupted"
    finally:
        envs.close()


def _drain(envs: RemoteVectorEnv) -> dict[int, float]:
    """Every result still coming, by slot (the count each env's observation carries)."""
    counts = {}
    while True:
        try:
            observations, _, _, _, infos = envs.recv(timeout=10)
        except NoAsyncCallError:
            return counts
        for row, slot in enumerate(infos["env_id"].tolist()):
            assert slot not in counts, f"slot {slot} returned twice"
            counts[slot] = float(observations[row, 0])


@pytest.mark.parametrize("plane", ["shm", "uds", False], ids=["slabs", "uds", "zmq"])
def test_a_send_cut_short_at_any_call_leaves_each_slot_its_own_results(plane):
    """Partial batches, two members of one env each, every send() for both: for every n, a send interrupted at its
    n-th Python call (with slabs, the actions written straight in them) leaves each slot either in flight with its
    command sent, so that its result comes, or idle; the sends and recvs after it return each slot's own results
    (each env's count goes up by one a step, whether the cut send reached it or not), and with slabs the commands
    still travel in them."""
    if plane == "shm" and not shared.AVAILABLE:
        pytest.skip("shared-memory slabs need x86-64 Linux")
    envs = RemoteVectorEnv([Counter] * 2, num_clients=2, batch_size=2, data_plane=plane, timeout=30)
    try:
        _reset_every_slot(envs)
        actions, slots = np.zeros(2, dtype=np.int64), np.array([0, 1])
        counts = {0: 0.0, 1: 0.0}
        channels = list(envs._server.mux.channels.values())
        assert all(link.slabs == (plane == "shm") for link in channels) and len(channels) == (2 if plane else 0)
        cuts = 0
        for number in range(1, 400):
            send = lambda: envs.send(actions, slots)  # noqa: E731
            cut, _ = call_interrupted_at(number, KeyboardInterrupt, send, within="/gym_remote/")
            came = _drain(envs)
            assert_nothing_awaited(envs)
            for slot, count in came.items():
                assert count in (counts[slot] + 1, counts[slot] + 2), f"cut at call {number}: slot {slot} {count}"
                counts[slot] = count
            if not cut:
                assert set(came) == {0, 1}
                break
            cuts += 1
            envs.send(actions, slots)
            first = _drain(envs)
            assert set(first) == {0, 1}, f"cut at call {number}: {first}"
            for slot, count in first.items():  # (+2: the cut send stepped the env, its result was dropped)
                assert count in (counts[slot] + 1, counts[slot] + 2), f"cut at call {number}: slot {slot} {count}"
            envs.send(actions, slots)
            second = _drain(envs)
            assert second == {slot: count + 1 for slot, count in first.items()}, f"cut at call {number}: {second}"
            counts = second
        assert cuts >= 10
        posted = sum(link.slab_posts for link in channels)
        for _ in range(5):
            envs.send(actions, slots)
            assert _drain(envs) == {slot: count + 1 for slot, count in counts.items()}
            counts = {slot: count + 1 for slot, count in counts.items()}
        assert sum(link.slab_posts for link in channels) == posted + (5 * 2 if plane == "shm" else 0)
    finally:
        envs.close()


def _kind_of(frame: bytes) -> int | None:
    try:
        return protocol.parse_header(frame).kind
    except ProtocolError:
        return None


class _InterruptAfterTakingAHeader:
    """The router socket's ``recv``, raising KeyboardInterrupt right after it took the first RESULT header
    frame once armed: as pyzmq does when a signal comes while it receives (it checks for signals after every
    receive), so that frame is gone and the rest of its message waits in the socket."""

    def __init__(self, recv):
        self.recv, self.armed, self.fired = recv, False, False

    def __call__(self, *args, **kwargs):
        frame = self.recv(*args, **kwargs)
        if self.armed and isinstance(frame, bytes) and _kind_of(frame) == Kind.RESULT:
            self.armed, self.fired = False, True
            raise KeyboardInterrupt
        return frame


@pytest.mark.parametrize("call", ["step", "step_wait"])
def test_a_reply_that_lost_its_header_to_an_interrupt_is_not_taken_for_the_next_calls(call):
    """A step interrupted right after the learner took the header of a client's reply (over ZeroMQ): that
    reply belonged to the interrupted call, so the next step waits for its own reply and returns it, rather
    than counting the headless remains as its answer and returning the slot's old row."""
    envs = RemoteVectorEnv([Counter] * 2, num_clients=1, timeout=30, data_plane=False)
    try:
        envs.reset(seed=0)
        socket = envs._server.router.socket
        recv = socket.recv = _InterruptAfterTakingAHeader(socket.recv)
        recv.armed = True
        with pytest.raises(KeyboardInterrupt):
            if call == "step":
                envs.step(np.array([0, 0]))
            else:
                envs.step_async(np.array([0, 0]))
                envs.step_wait()
        assert recv.fired
        observations, _, _, truncations, infos = envs.step(np.array([0, 0]))
        assert observations[:, 0].tolist() == [2, 2], observations  # the count after both steps
        assert not truncations.any() and "client_lost" not in infos, infos
        observations, _, _, _, _ = envs.step(np.array([0, 0]))
        assert observations[:, 0].tolist() == [3, 3], observations
    finally:
        envs.close()


class _InterruptAfterTaking:
    """The router socket's ``recv``, raising KeyboardInterrupt right after it took a frame ``which(frame)`` picks
    once armed (as pyzmq does when a signal comes while it receives): that frame is gone, and the rest of its
    message waits in the socket."""

    def __init__(self, recv, which):
        self.recv, self.which, self.armed, self.fired = recv, which, False, False

    def __call__(self, *args, **kwargs):
        frame = self.recv(*args, **kwargs)
        if self.armed and self.which(frame):
            self.armed, self.fired = False, True
            raise KeyboardInterrupt
        return frame


def _is_result_header(frame: bytes) -> bool:
    return frame[:2] == protocol.MAGIC and protocol.parse_header(frame).kind == Kind.RESULT


@pytest.mark.parametrize("taken", ["routing id", "header"])
def test_a_reply_whose_frame_an_interrupt_took_leaves_its_slot_idle(taken):
    """Partial batches over ZeroMQ, a command to each of two members: recv() interrupted right after the
    learner took the routing id of a reply (the header that waits names no sender), or its header (the reply
    names no command: it is taken for the oldest its sender owes, as a client answers in order). The next
    recv() finds that reply cut short and drops it; its slot goes idle at once, as the README says, rather than
    staying in flight until that recv() times out (it waited for the reply that will not come); the next
    commands get their replies."""
    envs = RemoteVectorEnv([Counter] * 2, num_clients=2, batch_size=2, timeout=30, data_plane=False)
    try:
        _reset_every_slot(envs)
        socket = envs._server.router.socket
        members = set(envs._server.members.clients)
        which = members.__contains__ if taken == "routing id" else _is_result_header
        recv = socket.recv = _InterruptAfterTaking(socket.recv, which)
        envs.send(np.array([0, 0]), np.array([0, 1]))
        recv.armed = True
        with pytest.raises(KeyboardInterrupt):
            envs.recv()
        assert recv.fired
        started, returned = time.monotonic(), []
        while True:
            try:
                returned += envs.recv(timeout=10)[4]["env_id"].tolist()
            except NoAsyncCallError:
                break
        assert time.monotonic() - started < 5, "a slot stayed in flight after its reply was dropped"
        assert len(returned) < 2, returned  # (the dropped reply's slot returned nothing)
        envs.send(np.array([0, 0]), np.array([0, 1]))
        observations, _, _, _, infos = envs.recv(timeout=10)
        counts = dict(zip(infos["env_id"].tolist(), observations[:, 0].tolist(), strict=True))
        assert counts == {0: 2, 1: 2}, counts  # each env stepped twice
    finally:
        envs.close()


@pytest.mark.parametrize("num_clients", [1, 2])
@pytest.mark.parametrize("plane", ["shm", "uds", False], ids=["slabs", "uds", "zmq"])
def test_a_step_cut_short_at_any_call_leaves_the_next_steps_their_own(plane, num_clients):
    """For every n: a step interrupted at its n-th Python call (the learner's bookkeeping, the sending, the wait
    and the landing included; with slabs, the actions written in them) awaits nothing afterwards; the steps after
    it return their own results (each env's count goes up by one a step, whether the cut step reached it or not),
    and with slabs they still travel in them."""
    if plane == "shm" and not shared.AVAILABLE:
        pytest.skip("shared-memory slabs need x86-64 Linux")
    envs = RemoteVectorEnv([Counter] * 2, num_clients=num_clients, data_plane=plane, timeout=30)
    try:
        envs.reset(seed=0)
        actions = np.zeros(2, dtype=np.int64)
        counts = envs.step(actions)[0][:, 0]
        channels = list(envs._server.mux.channels.values())
        assert len(channels) == (num_clients if plane else 0)
        assert all(link.slabs == (plane == "shm") for link in channels)
        cuts = 0
        for number in range(1, 400):
            cut, result = call_interrupted_at(
                number, KeyboardInterrupt, lambda: envs.step(actions), within="/gym_remote/"
            )
            if not cut:
                assert (result[0][:, 0] == counts + 1).all()
                counts = result[0][:, 0]
                break
            cuts += 1
            assert_nothing_awaited(envs)
            first = envs.step(actions)[0][:, 0]
            second = envs.step(actions)[0][:, 0]
            assert set(first - counts) <= {1.0, 2.0}, f"cut at call {number}: {counts} then {first}"
            assert (second == first + 1).all(), f"cut at call {number}: {first} then {second}"
            counts = second
        assert cuts >= 20
        posted = sum(link.slab_posts for link in channels)
        for _ in range(5):
            counts += 1
            assert (envs.step(actions)[0][:, 0] == counts).all()
        assert sum(link.slab_posts for link in channels) == posted + (5 * num_clients if plane == "shm" else 0)
    finally:
        envs.close()


@pytest.mark.timeout(120, method="thread")
@interrupts_at_random_moments()
def test_steps_and_closes_interrupted_at_random_moments_leave_nothing_behind(caplog):
    """Vectors of two clients, each stepped with Ctrl-C at random moments (microseconds to
    milliseconds in, while replies of 320 KB arrive) and then closed with a Ctrl-C at a random moment too, then
    closed again, as a user who presses Ctrl-C twice: a step raises nothing but the interrupt, the next step
    returns, the second close returns and ends the clients, and the learner drops no message as malformed.
    (Twice bugs were found this way: a recovery that handed out a message under the last one's header, and a
    close that waited forever for a lock an interrupt had left held.)"""
    env_fns = [functools.partial(make_action_digest, action_bytes=8, padding=40_000)] * 2
    rng = np.random.default_rng(0)
    actions = np.full((2, 8), 7, dtype=np.uint8)
    caplog.set_level(logging.WARNING, logger="gym_remote")
    vectors = 0
    with random_interrupts(rng) as cut_short:
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            envs = RemoteVectorEnv(env_fns, num_clients=2, timeout=30)
            vectors += 1
            processes = [process for process in envs._launcher.processes if process is not None]
            try:
                envs.reset(seed=0)
                for _ in range(int(rng.integers(5, 40))):
                    cut_short(functools.partial(envs.step, actions), 2e-3)
                envs.step(actions)
            finally:
                cut_short(envs.close, 3e-3)
                envs.close()
            assert all(process.poll() is not None for process in processes), f"vector {vectors}: a client runs on"
            malformed = [record.getMessage() for record in caplog.records if "malformed" in record.getMessage()]
            assert not malformed, f"vector {vectors}: {malformed}"
    assert vectors >= 5


@pytest.mark.timeout(180, method="thread")
def test_a_join_cut_short_at_any_call_leaves_a_member_that_serves(thread_clients):
    """A step in which a member leaves and the client waiting in line takes over its slot, interrupted at each of the
    server's calls (the loss, the admission, the WELCOME, the join): afterwards every member has its links, the next
    steps are served, and the loss is reported once. (The soak's learner was left with a member an interrupt had
    welcomed but not attached, and spun for the reset's whole minute without reading a message.)"""
    envs = RemoteVectorEnv(num_envs=1, timeout=10, connect_timeout=10, liveness_timeout=2)
    server = envs._server
    actions = np.zeros(1, dtype=np.int64)

    def newcomer() -> ThreadClient:
        client = ThreadClient(envs.address, [Counter], liveness_timeout=2)
        thread_clients.append(client)
        return client

    try:
        member = newcomer()
        envs.reset(seed=0)
        cuts = 0
        for number in range(1, 400):
            waiter = newcomer()
            deadline = time.monotonic() + 10
            while not server.members.waiting:  # (handled only while the learner is inside a call)
                assert time.monotonic() < deadline, "the newcomer never got in line"
                server.poll()
            member.stop()  # it says BYE: the next step takes in its loss and admits the newcomer
            cut, result = call_interrupted_at(
                number, KeyboardInterrupt, lambda: envs.step(actions), within="/gym_remote/server.py"
            )
            steps = [] if cut else [result]
            linkless = [
                client.name for client in server.members.clients.values() if client.identity not in server._links
            ]
            assert not linkless, f"cut at call {number}: members without links {linkless}"
            steps += [envs.step(actions) for _ in range(3)]
            reports = [bool(step[4].get("client_lost", [False])[0]) for step in steps]
            assert reports.count(True) == 1, f"cut at call {number}: the loss reported {reports.count(True)} times"
            assert [client.name for client in server.members.clients.values()] == [waiter.client.name]
            member = waiter
            if not cut:
                break
            cuts += 1
        assert cuts >= 20
    finally:
        envs.close()
