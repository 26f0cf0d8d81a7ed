"""The soak's parameters and its fault schedule, all drawn from its seed.

The same seed gives the same parameters, the same faults at the same offsets (in seconds from the
start) with the same choices of victim (as a rank among the clients alive then), and the same learner
choices (:func:`learner_rng`). Wall-clock timing still differs from run to run, so what a fault hits
may differ; what was scheduled does not.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

NUM_ENVS = 8
LIVENESS = 2.0  # seconds: short, so that frozen clients are lost (and faults resolve) quickly

# fault kinds and how often each comes (weights)
KINDS = {
    "kill": 22,  # SIGKILL a client; the supervisor replaces it
    "term": 10,  # SIGTERM: it says BYE and exits; replaced
    "brief_freeze": 20,  # SIGSTOP for at most 0.3 x liveness, then SIGCONT: must be ridden out
    "freeze": 12,  # SIGSTOP for 2.5-3.5 x liveness, then SIGCONT: lost, then it rejoins; replaced meanwhile
    "multi_freeze": 6,  # 2-3 clients frozen at once beyond liveness: lost together, not one after another
    "extra": 16,  # a client started while every slot is served: it waits in line
}
BRIEF_FREEZE = (0.05, 0.3)  # x liveness
LONG_FREEZE = (2.5, 3.5)  # x liveness
GAP = (0.3, 2.5)  # seconds between two faults


@dataclass(frozen=True)
class Parameters:
    """What a seed chooses for the whole run."""

    seed: int
    mode: str  # autoreset mode: "NextStep" or "SameStep" (partial batches need one of them)
    bind: str  # "ipc" (a path in the soak's directory) or "tcp" (loopback, a free port)
    batch_size: int  # recv()'s batch size, below NUM_ENVS
    payload: int  # extra observation entries: 0, or enough for messages of a few hundred KiB
    initial_sizes: tuple[int, ...]  # envs of each client started first (they fill the slots)
    zmq_share: float  # the share of clients started with --no-data-plane (1: the learner offers no data plane)

    def describe(self) -> str:
        return (
            f"mode={self.mode} bind={self.bind} batch_size={self.batch_size} payload={self.payload} "
            f"initial clients={list(self.initial_sizes)} zmq share={self.zmq_share:.2f} "
            f"num_envs={NUM_ENVS} liveness={LIVENESS}"
        )


def parameters(seed: int) -> Parameters:
    rng = random.Random(f"parameters-{seed}")
    sizes: list[int] = []
    while sum(sizes) < NUM_ENVS:
        sizes.append(min(rng.choice([1, 1, 2, 2, 3]), NUM_ENVS - sum(sizes)))
    mode, bind = rng.choice(["NextStep", "SameStep"]), rng.choice(["ipc", "tcp"])
    batch_size, payload = rng.choice([1, 2, 3, 4, 5, 6]), rng.choice([0, 0, 0, 32768])
    zmq_share = rng.choice([0.25, 0.4, 0.5])
    if rng.random() < 0.25:  # (drawn last: the seeds of earlier runs still choose what they chose)
        zmq_share = 1.0
    return Parameters(seed, mode, bind, batch_size, payload, tuple(sizes), zmq_share)


@dataclass(frozen=True)
class PlannedFault:
    """One fault of the schedule: ``at`` seconds after the start; ``victims``: fractions in [0, 1) that pick
    clients by rank among those alive then; ``duration``: of a freeze; ``choice``: a number in [0, 1) for
    the fault's other choices (replacement sizes, the extra's size and plane)."""

    number: int
    at: float
    kind: str
    victims: tuple[float, ...]
    duration: float
    choice: float

    def describe(self) -> str:
        text = f"#{self.number} {self.kind} at +{self.at:.2f}s"
        return text + (f" for {self.duration:.2f}s" if self.duration else "")


def fault_schedule(seed: int, without: frozenset[str] = frozenset()) -> Iterator[PlannedFault]:
    """The faults of the soak of ``seed``, for ever, at increasing times (those of the kinds ``without``
    left out: the others keep their times and choices)."""
    rng = random.Random(f"faults-{seed}")
    kinds, weights = list(KINDS), list(KINDS.values())
    at = 3.0  # the clients have joined and the first episodes run
    for number in range(1, 10**9):
        at += rng.uniform(*GAP)
        kind = rng.choices(kinds, weights)[0]
        count = rng.choice([2, 3]) if kind == "multi_freeze" else 1
        if kind == "brief_freeze":
            duration = rng.uniform(*BRIEF_FREEZE) * LIVENESS
        elif kind in ("freeze", "multi_freeze"):
            duration = rng.uniform(*LONG_FREEZE) * LIVENESS
        else:
            duration = 0.0
        planned = PlannedFault(number, at, kind, tuple(rng.random() for _ in range(count)), duration, rng.random())
        if kind not in without:
            yield planned


def learner_rng(seed: int) -> random.Random:
    """The learner's choices: phases, actions, interrupts."""
    return random.Random(f"learner-{seed}")
