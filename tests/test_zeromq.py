"""gym_remote.links.zeromq against a real DEALER over ipc: the router's sends are whole or not at all, whatever
Python-level call an interrupt comes at.

An interrupt (Ctrl-C) reaches Python code where it checks for signals, at the start of every Python function
among others. ``sys.settrace`` raising at the n-th function entry stands for one, for every n in turn.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import zmq

from gym_remote.links.zeromq import Router

pytestmark = pytest.mark.timeout(60)


class _Interrupt(BaseException):
    pass


def _interrupt_at_call(number: int):
    """A trace function raising :class:`_Interrupt` at the ``number``-th Python function entry (1-based)."""
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        if event == "call":
            count += 1
            if count == number:
                raise _Interrupt
        return None

    return trace


@pytest.fixture
def router_and_dealer(tmp_path):
    context = zmq.Context()
    router = Router(context, f"ipc://{tmp_path}/router", liveness_timeout=30, max_message_bytes=1 << 30)
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.ROUTING_ID, b"dealer")
    dealer.connect(f"ipc://{tmp_path}/router")
    dealer.send(b"hello")
    assert dealer.poll(10_000, zmq.POLLOUT)
    assert router.socket.poll(10_000)
    assert router.socket.recv_multipart() == [b"dealer", b"hello"]
    try:
        yield router, dealer
    finally:
        router.close()
        dealer.close(linger=0)
        context.term()


def test_a_send_interrupted_at_any_call_goes_out_whole_or_not_at_all(router_and_dealer):
    """For every n: a four-frame send interrupted at its n-th Python call, then a marker message. The dealer
    gets the four frames whole (once) or nothing of them, then the marker; once n passes the send's last call,
    the send is not interrupted at all."""
    router, dealer = router_and_dealer
    frames = [b"header-frame", np.arange(1000, dtype=np.int32), memoryview(b"x" * 70_000), b"tail"]
    whole = [bytes(memoryview(frame).cast("B")) for frame in frames]
    interrupted = 0
    for number in range(1, 200):
        sys.settrace(_interrupt_at_call(number))
        try:
            router.send(b"dealer", frames)
            sys.settrace(None)
        except _Interrupt:
            interrupted += 1
        finally:
            sys.settrace(None)
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
        sys.settrace(_interrupt_at_call(number))
        try:
            router.send(b"dealer", frames)
            return False
        except _Interrupt:
            return True
        finally:
            sys.settrace(None)

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
