"""gym_remote.links.zeromq against a real DEALER over ipc: an interrupted send never leaves part of a message, nor
lets it run into the next; at a Python-level call it goes out whole or not at all. A message its handler read
only in part leaves the next whole.

An interrupt (Ctrl-C) reaches Python code where it checks for signals, at the start of every Python function
among others. ``sys.settrace`` raising at the n-th function entry stands for one, for every n in turn. Inside
pyzmq's compiled send it can come before the frame is queued or after; a send that raises there stands for one.
"""

from __future__ import annotations

import contextlib
import select
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from gym_remote.links import zeromq as zeromq_link
from gym_remote.links.zeromq import Dealer, Router
from tests.helpers import call_interrupted_at, interrupting_send

pytestmark = pytest.mark.timeout(60)


class _Interrupt(BaseException):
    pass


@contextlib.contextmanager
def _connected_pair(tmp_path, **router_options) -> Iterator[tuple[Router, zmq.Socket]]:
    """A router and a dealer (routing id ``b"dealer"``) connected to it; both closed at the end."""
    context = zmq.Context()
    address = f"ipc://{tmp_path}/router"
    router = Router(context, address, liveness_timeout=30, **router_options)
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.ROUTING_ID, b"dealer")
    dealer.connect(address)
    try:
        yield router, dealer
    finally:
        router.close()
        dealer.close(linger=0)
        context.term()


@pytest.fixture
def router_and_dealer(tmp_path):
    """A router and a dealer whose connection it has taken a first message from."""
    with _connected_pair(tmp_path, max_message_bytes=1 << 30) as (router, dealer):
        dealer.send(b"hello")
        assert dealer.poll(10_000, zmq.POLLOUT)
        assert router.socket.poll(10_000)
        assert router.socket.recv_multipart() == [b"dealer", b"hello"]
        yield router, dealer


@pytest.fixture
def reading_router_and_dealer(tmp_path):
    """A router that reads a HELLO whole (to learn its sender), and a dealer connected to it."""
    with _connected_pair(tmp_path, max_message_bytes=1 << 20, tell_peer=lambda header: header == b"hello") as pair:
        yield pair


def test_a_send_interrupted_at_any_call_goes_out_whole_or_not_at_all(router_and_dealer):
    """For every n: a four-frame send interrupted at its n-th Python call, then a marker message. The dealer
    gets the four frames whole (once) or nothing of them, then the marker; once n passes the send's last call,
    the send is not interrupted at all."""
    router, dealer = router_and_dealer
    frames = [b"header-frame", np.arange(1000, dtype=np.int32), memoryview(b"x" * 70_000), b"tail"]
    whole = [bytes(memoryview(frame).cast("B")) for frame in frames]
    interrupted = 0
    for number in range(1, 200):
        cut, _ = call_interrupted_at(number, _Interrupt, lambda: router.send(b"dealer", frames))
        interrupted += cut
        router.send(b"dealer", [b"marker", str(number).encode()])
        received = []
        while True:
            assert dealer.poll(10_000), f"call {number}: the marker never came"
            message = dealer.recv_multipart()
            if message[0] == b"marker":
                assert message[1] == str(number).encode()
                break
            received.append(message)
        assert received in ([], [whole]), f"interrupted at call {number}: the dealer got {[len(m) for m in received]}"
        if interrupted < number:  # the send ran to its end: no later call to interrupt
            break
    assert interrupted >= 1


def test_a_send_that_finishes_an_interrupted_one_can_be_interrupted_too(router_and_dealer):
    """Send A interrupted at its n-th call, then send B (which first finishes A) interrupted at its m-th call,
    for every n and m: the dealer gets A whole or not at all, then B whole or not at all, then a marker."""
    router, dealer = router_and_dealer
    first = [b"A-header", np.arange(300, dtype=np.int64), b"A-tail"]
    second = [b"B-header", memoryview(b"b" * 5000), b"B-middle", b"B-tail"]
    whole_first = [bytes(memoryview(frame).cast("B")) for frame in first]
    whole_second = [bytes(memoryview(frame).cast("B")) for frame in second]

    def send_interrupted(frames, number: int) -> bool:
        return call_interrupted_at(number, _Interrupt, lambda: router.send(b"dealer", frames))[0]

    for n in range(1, 40):
        for m in range(1, 40):
            first_cut = send_interrupted(first, n)
            second_cut = send_interrupted(second, m)
            router.send(b"dealer", [b"marker"])
            received = []
            while True:
                assert dealer.poll(10_000), f"n={n} m={m}: the marker never came"
                message = dealer.recv_multipart()
                if message == [b"marker"]:
                    break
                received.append(message)
            allowed = [[*a, *b] for a in ([], [whole_first]) for b in ([], [whole_second])]
            assert received in allowed, f"n={n} m={m}: the dealer got {[m_[0][:8] for m_ in received]}"
            if not second_cut:
                break
        if not first_cut:
            break


def _doubled_once(message: list[bytes], whole: list[bytes], routing_id: bytes) -> bool:
    """Whether ``message`` is ``whole`` with one of its frames (or the routing id, in front) sent twice."""
    return len(message) == len(whole) + 1 and any(
        message[:at] + message[at + 1 :] == whole and message[at] == ([routing_id, *whole])[at]
        for at in range(len(message))
    )


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_send_interrupted_inside_the_compiled_send_never_runs_into_the_next_message(
    router_and_dealer, monkeypatch, when
):
    """pyzmq's compiled send checks for signals before it queues a frame as well as after, so an interrupt out of
    it leaves in doubt whether that frame went out. For every n: the n-th frame's send raises ``before`` or
    ``after`` queueing it, then two more messages go out. The dealer gets the interrupted message whole, or
    with one frame doubled (a malformed message a client answers with ERROR), and then the next two whole:
    no message runs into the next."""
    router, dealer = router_and_dealer
    compiled = zeromq_link._queue
    frames = [b"header-frame", np.arange(10, dtype=np.int64), b"middle", b"tail"]
    whole = [bytes(memoryview(frame).cast("B")) for frame in frames]
    for number in range(1, len(frames) + 2):
        monkeypatch.setattr(zeromq_link, "_queue", interrupting_send(compiled, number, when == "before", _Interrupt))
        cut = False
        try:
            router.send(b"dealer", frames)
        except _Interrupt:
            cut = True
        monkeypatch.setattr(zeromq_link, "_queue", compiled)
        router.send(b"dealer", [b"next", str(number).encode()])
        router.send(b"dealer", [b"marker", str(number).encode()])
        received = []
        while True:
            assert dealer.poll(10_000), f"frame {number} interrupted {when} its send: the marker never came"
            message = dealer.recv_multipart()
            received.append(message)
            if message[0] == b"marker" or len(received) > 3:
                break
        assert received[-2:] == [[b"next", str(number).encode()], [b"marker", str(number).encode()]], (
            f"frame {number} interrupted {when} its send: the dealer got {received}"
        )
        assert len(received) == 3, f"frame {number} interrupted {when} its send: the dealer got {received}"
        assert received[0] == whole or (cut and _doubled_once(received[0], whole, b"dealer")), (
            f"frame {number} interrupted {when} its send: the dealer got {received[0]}"
        )
        if not cut:
            break


# -- what a handler leaves unread ---------------------------------------------------------------------


def _next_arrival(router: Router):
    assert router.socket.poll(10_000), "no message came"
    router.woke()  # (as the multiplexer tells it when its descriptor wakes)
    for _ in range(100):
        arrival = router.receive()
        if arrival is not None:
            return arrival
    raise AssertionError("the router had no message although its socket was readable")


def test_a_message_read_in_part_or_to_its_end_leaves_the_next_whole_at_the_router(router_and_dealer):
    router, dealer = router_and_dealer
    dealer.send_multipart([b"first", b"a", b"b"])
    dealer.send_multipart([b"second", b"c"])
    dealer.send_multipart([b"third", np.arange(3, dtype=np.int32)])
    dealer.send_multipart([b"fourth"])
    first = _next_arrival(router)
    assert first.header == b"first" and first.message.next() == b"a"  # b is left unread
    router.consume()
    second = _next_arrival(router)
    assert second.header == b"second" and second.message.rest() == [b"c"] and not second.message.more()
    router.consume()
    third = _next_arrival(router)
    target = np.zeros(3, dtype=np.int32)
    third.message.next_into([target], "RESULT")
    assert third.header == b"third" and target.tolist() == [0, 1, 2] and not third.message.more()
    router.consume()
    fourth = _next_arrival(router)
    assert fourth.header == b"fourth" and not fourth.message.more()


def test_a_message_read_in_part_or_to_its_end_leaves_the_next_whole_at_the_dealer(tmp_path):
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(f"ipc://{tmp_path}/router")
    dealer = Dealer(context, f"ipc://{tmp_path}/router", b"dealer", liveness_timeout=30)
    try:
        dealer.send([b"hello"])
        assert router.poll(10_000) and router.recv_multipart() == [b"dealer", b"hello"]
        messages = [[b"zero", b"0"], [b"one", b"x", b"y"], [b"two", b"z"], [b"three"], [b"four", b"w"]]
        for message in messages:
            router.send_multipart([b"dealer", *message])
        header, zero = dealer.receive(10.0)  # the first with a body is read whole (the connection is learnt)
        assert header == b"zero" and zero.rest() == [b"0"]
        header, one = dealer.receive(10.0)
        assert header == b"one" and one.next() == b"x"  # y is left unread
        header, two = dealer.receive(1.0)  # (another timeout)
        assert header == b"two" and two.next() == b"z" and not two.more()
        header, three = dealer.receive(10.0)
        assert header == b"three" and three.rest() == []
        header, four = dealer.receive(10.0)
        assert header == b"four" and four.rest() == [b"w"]
        assert dealer.receive(0.05) is None
    finally:
        dealer.close(linger=0)
        router.close(linger=0)
        context.term()


def test_a_look_at_the_router_that_finds_nothing_rearms_its_descriptor(router_and_dealer):
    """The multiplexer sleeps in poll() on the router's descriptor after a receive() found nothing: every
    message that comes after such a look must wake that poll, also after messages taken in a row. Until the
    router is told of the wake-up, it takes itself for quiet (a look that finds nothing costs a system call)."""
    router, dealer = router_and_dealer
    waker = select.poll()
    waker.register(router.fileno(), select.POLLIN)
    for round_number in range(50):
        assert router.receive() is None
        for index in range(round_number % 3 + 1):
            dealer.send_multipart([b"message", str(index).encode()])
        assert waker.poll(10_000), f"round {round_number}: a message came and the descriptor did not wake"
        assert router.receive() is None  # quiet until told of the wake-up
        router.woke()
        taken = []
        while len(taken) < round_number % 3 + 1:
            arrival = _next_arrival(router)
            taken.append(arrival.message.rest())
            router.consume()
        assert taken == [[str(index).encode()] for index in range(round_number % 3 + 1)]


def test_a_message_whose_routing_id_an_interrupt_took_is_reported_with_its_sender(router_and_dealer):
    """An interrupt out of the receive that took a message's routing id frame (pyzmq checks for signals after
    every receive): the message is dropped and reported cut short, naming its sender all the same (the routing
    id its peer gave in the handshake travels with every frame), and the next message arrives whole."""
    router, dealer = router_and_dealer
    dealer.send_multipart([b"header", b"body"])
    dealer.send_multipart([b"next", b"whole"])
    assert router.socket.poll(10_000)
    real, router.socket = router.socket, _ReceivesInterruptedAfterTaking(router.socket, {1})
    with pytest.raises(_Interrupt):
        router.receive()
    router.socket = real
    cut = router.receive()
    assert isinstance(cut, zeromq_link.CutShort) and (cut.identity, cut.header) == (b"dealer", b"header")
    arrival = _next_arrival(router)
    assert (arrival.identity, arrival.header, arrival.message.rest()) == (b"dealer", b"next", [b"whole"])


class _ReceivesInterruptedAfterTaking:
    """A socket whose receives numbered in ``numbers`` (counting from 1) raise :class:`_Interrupt` after taking
    their frame, as pyzmq's compiled receive does when a signal came while it took it."""

    def __init__(self, sock: zmq.Socket, numbers: set[int]) -> None:
        self._sock, self._numbers, self.receives = sock, numbers, 0

    def __getattr__(self, name: str):
        return getattr(self._sock, name)

    def _taken(self, result):
        self.receives += 1
        if self.receives in self._numbers:
            raise _Interrupt
        return result

    def recv(self, *args, **kwargs):
        return self._taken(self._sock.recv(*args, **kwargs))

    def recv_into(self, *args, **kwargs):
        return self._taken(self._sock.recv_into(*args, **kwargs))


def test_receives_interrupted_after_taking_their_frames_never_hand_out_a_frame_as_a_message(
    reading_router_and_dealer,
):
    """For every n and m: the n-th and m-th frames the router takes (the recovery from the first included) are
    taken by receives an interrupt cuts short, while messages read frame by frame and read whole arrive. Every
    message is handed out whole, from its sender, or reported cut short (never a frame of one as the start of
    another, never from no sender), in order; a marker after them arrives whole (or, if it was cut short, the
    next)."""
    router, dealer = reading_router_and_dealer
    sent = [[b"command", b"x", b"y", b"z"], [b"hello", b"a", b"b"], [b"command", b"w"], [b"hello", b"c"]]
    real = router.socket
    try:
        for n in range(1, 16):
            for m in [None, *range(n + 1, n + 6)]:
                where = f"receives {n} and {m} interrupted"
                for message in [*sent, [b"marker", f"{n} {m}".encode()]]:
                    dealer.send_multipart(message)
                router.socket = _ReceivesInterruptedAfterTaking(real, {n} if m is None else {n, m})
                handed_out, deadline = [], time.monotonic() + 10
                while not handed_out or handed_out[-1][0] != b"marker":
                    assert time.monotonic() < deadline, f"{where}: the marker never came; got {handed_out}"
                    try:
                        event = router.receive()
                        if event is None:
                            if not real.poll(200):  # (the marker was cut short: another one)
                                dealer.send_multipart([b"marker", b"again"])
                            router.woke()
                        elif isinstance(event, zeromq_link.CutShort):
                            assert event.identity in (b"dealer", None), f"{where}: cut short {event}"
                            assert event.header in (b"command", b"hello", b"marker", None), f"{where}: cut {event}"
                        else:
                            assert event.identity == b"dealer", f"{where}: a message from {event.identity}"
                            handed_out.append([event.header, *event.message.rest()])
                            router.consume()
                    except _Interrupt:
                        pass
                whole = iter(sent)
                assert all(message in whole for message in handed_out[:-1]), f"{where}: handed out {handed_out}"
                assert handed_out[-1][0] == b"marker", f"{where}: handed out {handed_out}"
                router.socket = real
                while real.poll(20):  # (a marker sent while the first was still on its way)
                    router.woke()
                    event = router.receive()
                    if event is not None:
                        assert [event.header, *event.message.rest()] == [b"marker", b"again"], f"{where}: {event}"
                        router.consume()
    finally:
        router.socket = real


def test_a_send_on_the_router_ends_its_quiet(router_and_dealer):
    """A send on the router may process the socket's commands, the wake-up of a message that came meanwhile
    among them, so that the descriptor never wakes for that message: after a send, the router looks again."""
    router, dealer = router_and_dealer
    assert router.receive() is None  # quiet
    dealer.send_multipart([b"header", b"body"])
    deadline = time.monotonic() + 10
    while not zmq.POLLIN & router.socket.get(zmq.EVENTS):  # (reading it processes the commands, as a send may)
        assert time.monotonic() < deadline, "the message did not come"
        time.sleep(0.01)
    assert router.receive() is None  # still taken for quiet: nothing told it otherwise
    router.send(b"dealer", [b"reply"])
    arrival = router.receive()
    assert arrival is not None and (arrival.header, arrival.message.rest()) == (b"header", [b"body"])
    assert dealer.poll(10_000) and dealer.recv() == b"reply"


def test_a_wait_on_the_router_alone_sleeps_in_libzmq_until_a_message_comes(router_and_dealer):
    """A learner with no other link waits in one libzmq receive: it returns a message sent while it sleeps (at
    once, not at its timeout), and None once the timeout passes with none."""
    router, dealer = router_and_dealer
    started = time.monotonic()
    assert router.wait(0.2) is None
    assert 0.15 <= time.monotonic() - started < 5
    sender = threading.Timer(0.2, dealer.send_multipart, ([b"header", b"body"],))
    sender.start()
    try:
        started = time.monotonic()
        arrival = router.wait(10.0)
        waited = time.monotonic() - started
    finally:
        sender.join(10)
    assert arrival is not None and (arrival.identity, arrival.header) == (b"dealer", b"header")
    assert arrival.message.rest() == [b"body"]
    assert waited < 5, f"the wait took {waited:.2f} s: it did not wake for the message"
    router.consume()


@pytest.mark.parametrize("spin", [0.0, 0.001])
def test_after_a_wait_takes_a_message_the_router_looks_again(router_and_dealer, spin):
    """A receive inside a wait processes the socket's commands, the wake-ups of messages behind the one it takes
    among them, so the descriptor may never wake for those: after such a receive, a look must ask the socket
    again (the router is not taken for quiet), and every message is found in order."""
    router, dealer = router_and_dealer
    assert router.receive() is None  # quiet
    for index in range(3):
        dealer.send_multipart([b"message", str(index).encode()])
    taken = []
    arrival = router.wait(10.0, spin)
    while arrival is not None:
        taken.append(arrival.message.rest())
        router.consume()
        arrival = router.receive()
        if arrival is None and len(taken) < 3:
            assert not router.socket.get(zmq.EVENTS) & zmq.POLLIN, "a message waits; the router took itself for quiet"
            arrival = router.wait(1.0)  # (the rest was still on its way through libzmq)
    assert taken == [[b"0"], [b"1"], [b"2"]]


def test_a_message_handed_out_by_a_wait_is_handed_out_again_until_consumed(router_and_dealer):
    """A wait hands out the current message first, as receive() does: a handler an interrupt cut short gets it
    again, and nothing is taken from the socket meanwhile."""
    router, dealer = router_and_dealer
    dealer.send_multipart([b"first", b"a"])
    dealer.send_multipart([b"second", b"b"])
    first = router.wait(10.0)
    assert first is not None and first.header == b"first"
    assert router.wait(10.0) is first
    assert first.message.rest() == [b"a"]
    router.consume()
    second = router.wait(10.0)
    assert second is not None and (second.header, second.message.rest()) == (b"second", [b"b"])


def test_a_message_read_whole_that_an_interrupt_cuts_short_is_dropped_and_the_next_arrives_whole(
    reading_router_and_dealer,
):
    """A message whose sender the router learns (a HELLO) is read whole when its header comes. For every n: that
    read interrupted at its n-th Python call. The router hands the message out whole, or reports it cut short
    with its header (never its later frames as a message of their own); the next message arrives whole."""
    router, dealer = reading_router_and_dealer
    cuts = 0
    for number in range(1, 200):
        dealer.send_multipart([b"hello", b"a", b"b", b"c"])
        dealer.send_multipart([b"next", str(number).encode()])
        assert router.socket.poll(10_000)
        router.woke()
        _, first = call_interrupted_at(number, _Interrupt, router.receive)
        if first is None:
            first = _next_arrival(router)
        if isinstance(first, zeromq_link.CutShort):
            cuts += 1
            assert first.header in (b"hello", None) and first.identity in (b"dealer", None), f"call {number}"
        else:
            assert first.header == b"hello" and first.message.rest() == [b"a", b"b", b"c"], f"call {number}"
            router.consume()
        following = _next_arrival(router)
        assert (following.header, following.message.rest()) == (b"next", [str(number).encode()]), (
            f"interrupted at call {number}: the next message came as {following}"
        )
        router.consume()
        if isinstance(first, zeromq_link.Arrival) and cuts and number > 20:
            break
    assert cuts >= 1
