"""gym_remote: a Gymnasium VectorEnv whose environments run in ZeroMQ clients, local or remote.

>>> import gymnasium as gym
>>> from gym_remote import RemoteVectorEnv
>>> envs = RemoteVectorEnv([lambda: gym.make("CartPole-v1")] * 4)   # a drop-in for SyncVectorEnv
>>> obs, infos = envs.reset(seed=0)
>>> envs.close()
"""

from gym_remote.client import EnvClient
from gym_remote.errors import (
    ClientLostError,
    EncodeError,
    GymRemoteError,
    JoinRefusedError,
    ProtocolError,
    RemoteEnvError,
    RemoteTimeoutError,
)
from gym_remote.protocol import PROTOCOL_VERSION
from gym_remote.registration import REMOTE_VECTOR_ENV_ID, register
from gym_remote.security import SecurityOptions
from gym_remote.vector_env import RemoteVectorEnv

__all__ = [
    "RemoteVectorEnv",
    "SecurityOptions",
    "EnvClient",
    "GymRemoteError",
    "EncodeError",
    "ProtocolError",
    "RemoteEnvError",
    "JoinRefusedError",
    "ClientLostError",
    "RemoteTimeoutError",
    "PROTOCOL_VERSION",
    "REMOTE_VECTOR_ENV_ID",
    "__version__",
]

__version__ = "0.1.0"

# No NullHandler on the "gym_remote" logger, deliberately: a learner that configures no logging still sees the
# warnings (a lost client, a refused one) through Python's last-resort handler; INFO needs logging configured.
register()  # gym.make_vec("gym_remote/RemoteVectorEnv-v0", num_envs=..., env_id=...)
