"""The learner's copy of the batch: what the clients' results land in, and what calls return from it."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from copy import deepcopy
from itertools import repeat
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array

from gym_remote import codec, protocol
from gym_remote.commands import PlanOf
from gym_remote.errors import ProtocolError, RemoteEnvError
from gym_remote.membership import ClientInfo

__all__ = ["Landing", "ResultBatch"]


class ResultBatch:
    """One row per slot: observations, rewards, terminations and truncations, and each slot's infos.

    A RESULT lands in the rows of the slots it answers for (observations with an array layout are
    received straight into the batch's arrays). The infos, and in SAME_STEP mode the final observation
    and info, are kept per slot until a call batches them (:meth:`infos`), as Gymnasium's
    ``_add_info`` does slot by slot.
    """

    def __init__(self, observation_space: gym.Space, num_envs: int, legacy_infos: bool = False) -> None:
        self.space = observation_space
        self.legacy_infos = legacy_infos  # infos laid out as Gymnasium 0.29 did (see infos())
        self.num_envs = num_envs
        self.observations: Any = create_empty_array(observation_space, n=num_envs, fn=np.zeros)
        self.is_array = codec.array_leaf_spaces(observation_space) is not None
        self.leaves = codec.batch_leaves(observation_space, self.observations) if self.is_array else None
        self.env_obs: list[Any] = [None] * num_envs  # the observations without an array layout, per slot
        self.rewards = np.zeros(num_envs, dtype=np.float64)
        self.terminations = np.zeros(num_envs, dtype=np.bool_)
        self.truncations = np.zeros(num_envs, dtype=np.bool_)
        self.slot_infos: dict[int, dict] = {}
        self.slot_finals: dict[int, tuple[Any, dict]] = {}
        self._loss_finals: dict[int, tuple[Any, dict]] = {}  # SAME_STEP: the final of an episode a loss ended

    def clear_infos(self) -> None:
        self.slot_infos.clear()
        self.slot_finals.clear()

    def landing(
        self,
        plan_of: PlanOf | None = None,
        arrivals: list[tuple[int, int]] | None = None,
        failures: list[tuple[int, int, RemoteEnvError]] | None = None,
        replies: list[int] | None = None,
    ) -> Landing:
        """A sink (:class:`~gym_remote.server.Sink`) that lands RESULTs in this batch.

        ``plan_of(client)``: the slots a command was for, when not all of each client's;
        ``arrivals``: a list ``(slot, seq)`` is appended to for each slot of each landed RESULT, in arrival
        order (``seq``: the command's sequence number the RESULT answers); ``failures``: for a STEP with
        FLAG_EACH, ``(slot, seq, error)`` is appended to it for each slot whose env raised (that slot has no
        arrival; None: a RESULT listing errors is malformed); ``replies``: ``seq`` of each RESULT landed.
        """
        return Landing(self, plan_of, arrivals, failures, replies)

    def _read_value(self, slots: list[int], extra: Any, failed: Collection[int] = ()) -> None:
        """The optional part of a RESULT for ``slots``: observations that are not arrays, infos, finals (none of
        the ``failed`` slots, whose envs raised)."""
        count = len(slots)
        if not isinstance(extra, dict):
            raise ProtocolError("the RESULT value section must be a dict")
        observations = _checked_list(extra.get("obs"), count, "obs")
        if not self.is_array and observations is None:
            raise ProtocolError(f"RESULT must carry a list of {count} observations")
        infos = _checked_list(extra.get("infos"), count, "infos")
        finals = _checked_list(extra.get("final"), count, "final")
        for index, slot in enumerate(slots):
            if slot in failed:
                continue
            if observations is not None:
                self.env_obs[slot] = observations[index]
            if infos is not None and infos[index]:
                if not isinstance(infos[index], dict):
                    raise ProtocolError(f"the info of env {index} is not a dict")
                self.slot_infos[slot] = infos[index]
            else:
                self.slot_infos.pop(slot, None)
            if finals is not None and finals[index] is not None:
                final = finals[index]
                if not isinstance(final, tuple) or len(final) != 2 or not isinstance(final[1], dict):
                    raise ProtocolError(f"final of env {index} must be a (final_obs, final_info) pair")
                self.slot_finals[slot] = final
            else:
                self.slot_finals.pop(slot, None)

    def gather(self) -> None:
        """Batch the observations that travel as values (array observations are in place already)."""
        if not self.is_array:
            self.observations = concatenate(self.space, self.env_obs, self.observations)

    def infos(self, batch: Sequence[int] | None = None) -> dict[str, Any]:
        """The infos batched with Gymnasium's ``_add_info``, as ``SyncVectorEnv`` batches them.

        Of every slot, by slot; or of the slots ``batch`` (a partial batch, in its order). For each slot
        first its final observation and info, then its info.
        With ``legacy_infos``, as Gymnasium 0.29 laid them out instead: each slot's info with
        ``final_observation`` and ``final_info`` added, batched by :func:`_add_legacy_info`.
        """
        infos: dict[str, Any] = {}
        if not self.slot_infos and not self.slot_finals:
            return infos
        if batch is None:
            order = [(slot, slot) for slot in sorted(self.slot_infos.keys() | self.slot_finals.keys())]
            batcher = _InfoBatcher(self.num_envs)
            final_of, info_of = self.slot_finals.get, self.slot_infos.get
        else:
            order, batcher = list(enumerate(batch)), _InfoBatcher(len(batch))
            final_of, info_of = self.slot_finals.get, self.slot_infos.get
        for position, slot in order:
            final = final_of(slot, None)
            if self.legacy_infos:
                info = dict(info_of(slot, {}))
                if final is not None:
                    info["final_observation"], info["final_info"] = final
                _add_legacy_info(infos, info, position, batcher.num_envs)
                continue
            if final is not None:
                infos = batcher._add_info(infos, {"final_obs": final[0], "final_info": final[1]}, position)
            infos = batcher._add_info(infos, info_of(slot, {}), position)
        return infos

    def prepare_loss_reports(self, slots: list[int], same_step: bool) -> None:
        """Forget what ``slots`` (whose client was lost) held; in SAME_STEP mode their last observation is
        kept, to become ``final_obs`` of the episode the loss ends once a replacement has reset."""
        for slot in slots:
            self.slot_infos.pop(slot, None)
            self.slot_finals.pop(slot, None)
            if same_step:
                self._loss_finals[slot] = (self.last_observation(slot), {"client_lost": True})

    def write_loss_reports(self, slots: list[int]) -> None:
        """The results of ``slots`` report their lost client: reward 0, truncated, ``client_lost`` added
        to their infos (a replacement's reset info, in SAME_STEP mode, with the lost episode's final)."""
        self.rewards[slots] = 0.0
        self.terminations[slots] = False
        self.truncations[slots] = True
        for slot in slots:
            self.slot_infos[slot] = {**self.slot_infos.get(slot, {}), "client_lost": True}
            final = self._loss_finals.pop(slot, None)
            if final is not None:
                self.slot_finals[slot] = final

    def write_masked(self, slots: list[int]) -> None:
        """The rows of ``slots``, which no client served in this step (``empty_slots="mask"``): reward 0, neither
        terminated nor truncated, the observation they held, and ``unserved`` in their infos."""
        self.rewards[slots] = 0.0
        self.terminations[slots] = False
        self.truncations[slots] = False
        for slot in slots:
            self.slot_infos[slot] = {**self.slot_infos.get(slot, {}), "unserved": True}

    def last_observation(self, slot: int) -> Any:
        """A copy of the last observation the batch holds for ``slot``."""
        leaves = self.leaves
        if leaves is None:
            return deepcopy(self.env_obs[slot])
        return codec.leaves_to_batch(self.space, [leaf[slot].copy() for leaf in leaves])

    def step_results(self, copy: bool, per_env: bool = False) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any]:
        """What ``step`` returns: every slot, the observations copied if ``copy``; with ``per_env``
        the infos as :meth:`per_env_infos` gives them instead of batched."""
        return (
            self.observations_out(copy),
            np.copy(self.rewards),
            np.copy(self.terminations),
            np.copy(self.truncations),
            self.per_env_infos() if per_env else self.infos(),
        )

    def per_env_infos(self) -> tuple[list[dict], list[tuple[Any, dict] | None]]:
        """Each slot's info (a copy), and its ``(final_obs, final_info)`` or None: unbatched."""
        infos = [dict(self.slot_infos.get(slot, {})) for slot in range(self.num_envs)]
        return infos, [self.slot_finals.get(slot) for slot in range(self.num_envs)]

    def observations_out(self, copy: bool) -> Any:
        if not copy:
            return self.observations
        return self.observations.copy() if type(self.observations) is np.ndarray else deepcopy(self.observations)

    def forget_infos(self, slots: list[int]) -> None:
        """The infos (and finals) of ``slots`` were returned: they are not returned again."""
        for slot in slots:
            self.slot_infos.pop(slot, None)
            self.slot_finals.pop(slot, None)

    def take(self, slots: list[int]) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """What ``recv`` returns: the rows of ``slots`` in this order, their infos, and ``infos["env_id"]``
        (nothing is consumed: see :meth:`forget_infos`)."""
        ids = np.asarray(slots, dtype=np.int32)
        leaves = self.leaves
        if leaves is not None:
            observations = codec.leaves_to_batch(self.space, [leaf[ids] for leaf in leaves])
        else:
            empty = create_empty_array(self.space, n=len(slots), fn=np.zeros)
            observations = deepcopy(concatenate(self.space, [self.env_obs[slot] for slot in slots], empty))
        infos = self.infos(slots)
        infos["env_id"] = ids
        return observations, self.rewards[ids], self.terminations[ids], self.truncations[ids], infos


class Landing:
    """Lands RESULTs in a :class:`ResultBatch`: the server's sink for a reset or step (see ``ResultBatch.landing``).

    Observations with an array layout are received straight into the batch's rows when a client's
    slots are consecutive and the command was for all of them; else into scratch arrays, scattered
    when the RESULT lands.
    """

    def __init__(
        self,
        batch: ResultBatch,
        plan_of: PlanOf | None,
        arrivals: list[tuple[int, int]] | None,
        failures: list[tuple[int, int, RemoteEnvError]] | None = None,
        replies: list[int] | None = None,
    ) -> None:
        self.batch = batch
        self.plan_of = plan_of
        self.arrivals = arrivals
        self.failures = failures
        self.replies = replies
        # of the RESULT being received, from targets() to land(): its slots, whether they are all of
        # its client's, and the arrays its observation frames went into
        self._slots: list[int] = []
        self._whole = True
        self._scratch: list[np.ndarray] = []

    def targets(self, client: ClientInfo, header: protocol.Header) -> list[np.ndarray]:
        plan = self.plan_of(client) if self.plan_of is not None else None
        if plan is None or plan.indexes is None:
            whole, slots = True, client.slots
        else:
            whole, slots = False, plan.slots
        self._slots, self._whole = slots, whole
        if header.count != len(slots):
            raise ProtocolError(f"RESULT for {header.count} envs, the command was for {len(slots)}")
        if whole:
            self._scratch = client.observation_targets
        else:
            self._scratch = [np.empty((len(slots), *leaf.shape[1:]), leaf.dtype) for leaf in self.batch.leaves or ()]
        return self._scratch

    def land(self, client: ClientInfo, header: protocol.Header, scalars: bytes | None, value: Any) -> None:
        batch, slots, whole = self.batch, self._slots, self._whole
        count = len(slots)
        # a RESULT always has its scalars (None comes only with the CALL_RESULTs of other sinks): no check here
        frame: bytes = scalars  # pyright: ignore[reportAssignmentType]
        # of one env (the most common client) as Python scalars, stored at its slot: much cheaper than arrays of one
        results = protocol.parse_one_result(frame) if count == 1 else protocol.parse_result_scalars(frame, count)
        rows = client.rows if whole else np.asarray(slots, dtype=np.intp)
        failed = self._failed(client, slots, header.seq, value) if type(value) is dict and "errors" in value else ()
        if value is not None:
            batch._read_value(slots, value, failed)
        elif not batch.is_array:
            raise ProtocolError("RESULT lacks the value section that carries its observations")
        elif batch.slot_infos or batch.slot_finals:  # a RESULT without infos replaces what the slots had
            for slot in slots:
                batch.slot_infos.pop(slot, None)
                batch.slot_finals.pop(slot, None)
        at = slots[0] if count == 1 else rows
        batch.rewards[at], batch.terminations[at], batch.truncations[at] = results
        leaves = batch.leaves
        if leaves is not None and (not whole or client.slot_slice is None):  # not received in place
            for leaf, target in zip(leaves, self._scratch, strict=True):
                leaf[rows] = target
        if failed and self.failures is not None:  # (_failed() makes sure it is)
            self.failures.extend((slot, header.seq, error) for slot, error in failed.items())
        if self.arrivals is not None:
            landed = [slot for slot in slots if slot not in failed] if failed else slots
            self.arrivals.extend(zip(landed, repeat(header.seq, len(landed))))
        if self.replies is not None:
            self.replies.append(header.seq)

    def _failed(self, client: ClientInfo, slots: list[int], seq: int, value: dict) -> dict[int, RemoteEnvError]:
        """The slots whose envs raised, and their errors, from a RESULT's ``errors`` (FLAG_EACH, PROTOCOL.md §5.6)."""
        if self.failures is None:
            raise ProtocolError("RESULT lists errors, but its command did not ask for them (FLAG_EACH)")
        reports = _checked_list(value["errors"], len(slots), "errors")
        if reports is None:
            return {}
        return {
            slot: client.env_error(report, "step", client.slots.index(slot))
            for slot, report in zip(slots, reports, strict=True)
            if report is not None
        }


class _InfoBatcher:
    """Gymnasium's ``VectorEnv._add_info`` for a batch of ``size`` envs (a partial batch is smaller)."""

    _add_info = VectorEnv._add_info

    def __init__(self, size: int) -> None:
        self.num_envs = size


def _add_legacy_info(infos: dict[str, Any], info: dict[str, Any], position: int, size: int) -> None:
    """Add one env's ``info`` at ``position`` as Gymnasium 0.29's ``VectorEnv._add_info`` did: every key
    (dicts included, not recursed into) an array of ``size`` with a ``_key`` mask; Python and numpy
    numbers in an array of their type, anything else in an object array of None."""
    for key, value in info.items():
        if key not in infos:
            kind = type(value)
            if kind in (int, float, bool) or issubclass(kind, np.number):
                infos[key] = np.zeros(size, dtype=kind)
            else:
                infos[key] = np.full(size, None, dtype=object)
            infos[f"_{key}"] = np.zeros(size, dtype=np.bool_)
        infos[key][position] = value
        infos[f"_{key}"][position] = True


def _checked_list(value: Any, count: int, name: str) -> list | None:
    if value is not None and (not isinstance(value, list) or len(value) != count):
        raise ProtocolError(f"RESULT {name} must be a list of {count} entries")
    return value
