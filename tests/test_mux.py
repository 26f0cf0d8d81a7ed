"""The learner's multiplexer (gym_remote/links/mux.py) on a real ROUTER socket and a real data channel (a
Unix socket pair), without a server: what it hands out when reads of a channel were cut short."""

from __future__ import annotations

import socket
import struct
import sys

import pytest
import zmq

from gym_remote.links.base import Arrival
from gym_remote.links.channel import Channel
from gym_remote.links.mux import Multiplexer
from gym_remote.links.zeromq import Router

pytestmark = pytest.mark.timeout(60)


class _Interrupt(BaseException):
    pass


@pytest.fixture
def mux_and_peer(tmp_path):
    """A multiplexer waiting on a router and on the channel of member b"member"; the member's end of the
    channel, as a raw socket."""
    context = zmq.Context()
    router = Router(context, f"ipc://{tmp_path}/router", liveness_timeout=30, max_message_bytes=1 << 20)
    learner_end, member_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    channel = Channel(learner_end, max_frame_bytes=1 << 20)
    mux = Multiplexer(router)
    mux.add(b"member", channel)
    try:
        yield mux, channel, member_end
    finally:
        mux.remove(b"member")
        channel.close()
        member_end.close()
        router.close()
        context.term()


def _record(*frames: bytes) -> bytes:
    """A data channel record as it travels: the frame count, each frame's length, the frames."""
    lengths = struct.pack(f"<I{len(frames)}Q", len(frames), *(len(frame) for frame in frames))
    return lengths + b"".join(frames)


def _interrupted_before(function_name: str, call):
    """Run ``call()`` with an interrupt raised as it enters a function named ``function_name`` (as Ctrl-C
    would at that bytecode); the interrupt must come."""

    def trace(frame, event, arg):
        if event == "call" and frame.f_code.co_name == function_name:
            sys.settrace(None)
            raise _Interrupt
        return None

    sys.settrace(trace)
    try:
        with pytest.raises(_Interrupt):
            call()
    finally:
        sys.settrace(None)


def test_a_channel_whose_cut_short_read_took_part_of_a_record_hands_it_out_once_whole(mux_and_peer):
    """An interrupt between a channel's read and its accounting leaves the channel with bytes to take in
    without a system call: the multiplexer looks at it first, finds the record still incomplete once the read
    is accounted for, and hands out nothing; the rest of the record then comes as one arrival."""
    mux, channel, member_end = mux_and_peer
    whole = _record(b"header", b"body")
    member_end.sendall(whole[:7])
    _interrupted_before("_settle_read", channel.receive)
    assert channel.buffered(), "the cut-short read is not pending: the test no longer sets up its case"
    for _ in range(2):  # the router and the channels take turns at being looked at first
        assert mux.next(timeout=0.05) is None
    member_end.sendall(whole[7:])
    event = mux.next(timeout=10)
    assert isinstance(event, Arrival), event
    assert (event.identity, event.header, bytes(event.message.next())) == (b"member", b"header", b"body")
    channel.consume()
    assert mux.next(timeout=0.05) is None
