"""The link layer: the only code of gym_remote's two faces that touches a socket.

A *link* carries one membership's messages between the learner and a client, whole, in both
directions (:mod:`gym_remote.links.base` says what every link promises):

* :class:`~gym_remote.links.zeromq.Route`: over the learner's ROUTER socket
  (:class:`~gym_remote.links.zeromq.Router`), for every member; the client's end is a
  :class:`~gym_remote.links.zeromq.Dealer`;
* :class:`~gym_remote.links.channel.Channel`: over a Unix socket, for members on the learner's host
  (the same-host data plane, PROTOCOL.md §13), set up through the
  :class:`~gym_remote.links.channel.Listener`; with a client's shared block
  (:mod:`gym_remote.links.shared`) what fits travels through its mailboxes instead (§13.5).

The learner waits on all of them at once with one :class:`~gym_remote.links.mux.Multiplexer`;
:mod:`gym_remote.links.fork` keeps forked children from holding any of them. The server
(:mod:`gym_remote.server`) and the client (:mod:`gym_remote.client`) speak the protocol over links
and never call a socket themselves.
"""

from __future__ import annotations

from gym_remote.links.base import Arrival, Broken, CutShort, LinkBroken, Message, Peer

__all__ = ["Arrival", "Broken", "CutShort", "LinkBroken", "Message", "Peer"]
