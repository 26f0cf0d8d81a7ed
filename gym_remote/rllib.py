"""RLlib on RemoteVectorEnv: the autoreset mode its env runners need, enforced where RLlib builds the env.

RLlib's new API stack (Ray 2.52 or later) builds each env runner's envs with
``gym.make_vec(config.env, num_envs=..., vectorization_mode=config.gym_env_vectorize_mode, **config.env_config)``,
so the config alone puts RemoteVectorEnv under it::

    config.environment("gym_remote:gym_remote/RemoteVectorEnv-v0", env_config={"env_id": "CartPole-v1"})
    config.env_runners(gym_env_vectorize_mode="vector_entry_point")

Its sampling loop takes the observation that follows a finished episode as the first of the next one, which
holds only with next-step autoreset, and it checks no env's mode: in any other mode it would learn from wrong
transitions without a word. So the id's entry point refuses another mode when RLlib is among its callers
(:func:`check_autoreset_mode`). Needs nothing from Ray to import.
"""

from __future__ import annotations

import sys
from types import FrameType

from gymnasium.vector import AutoresetMode

__all__ = ["RLLIB_AUTORESET_MODE", "check_autoreset_mode", "rllib_caller"]

RLLIB_AUTORESET_MODE = AutoresetMode.NEXT_STEP
"""The only autoreset mode RLlib's env runners sample correctly."""


def rllib_caller() -> str | None:
    """The name of the innermost module of RLlib (``ray.rllib...``) on the call stack, None if there is none.

    RLlib passes nothing to the envs it builds that says who built them (only ``env_config``'s items reach
    ``gym.make_vec``), so its callers are what tells.
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module == "ray.rllib" or module.startswith("ray.rllib."):
            return module
        frame = frame.f_back
    return None


def check_autoreset_mode(autoreset_mode: str | AutoresetMode) -> None:
    """Raise ValueError if RLlib is building a RemoteVectorEnv in ``autoreset_mode`` and that is not
    :data:`RLLIB_AUTORESET_MODE`; do nothing for any other caller."""
    mode = AutoresetMode(autoreset_mode)
    if mode is RLLIB_AUTORESET_MODE:
        return
    caller = rllib_caller()
    if caller is not None:
        raise ValueError(
            f"RLlib ({caller}) is building a RemoteVectorEnv with autoreset_mode={mode.value!r}, but RLlib samples "
            "as if a finished env's next step returned its reset observation (next-step autoreset) and would "
            f"learn from wrong transitions: leave autoreset_mode out of env_config (the default is "
            f"{RLLIB_AUTORESET_MODE.value!r}) or pass autoreset_mode={RLLIB_AUTORESET_MODE.value!r}"
        )
