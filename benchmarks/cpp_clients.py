"""RemoteVectorEnv served by C++ client processes (clients/cpp), for the suite's rows next to the Python
client. Build the client first: ``cmake -S clients/cpp -B clients/cpp/build && cmake --build clients/cpp/build``.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
from pathlib import Path

import gymnasium as gym

from gym_remote import RemoteVectorEnv

BUILD = Path(__file__).resolve().parent.parent / "clients" / "cpp" / "build"
PROGRAMS = {"cartpole": BUILD / "gym_remote_cartpole_client", "null": BUILD / "gym_remote_null_client"}
"""The C++ CartPole-v1, and the zero-cost env of ``bench_envs.NullEnv``."""


def available() -> bool:
    return all(program.exists() for program in PROGRAMS.values())


class CppClients(gym.vector.VectorWrapper):
    """A RemoteVectorEnv of ``num_envs`` slots on ``spaces`` at an ipc or tcp address, served by ``clients``
    C++ client processes serving ``env`` (a key of PROGRAMS); closing it ends them, by pid."""

    def __init__(
        self, env: str, spaces: tuple[gym.Space, gym.Space], num_envs: int, clients: int, transport: str = "ipc"
    ) -> None:
        if num_envs % clients:
            raise ValueError(f"{num_envs} envs do not split evenly over {clients} clients")
        self._directory = tempfile.TemporaryDirectory(prefix="gym-remote-bench-cpp-")
        bind = f"ipc://{self._directory.name}/server" if transport == "ipc" else "tcp://127.0.0.1:*"
        envs = RemoteVectorEnv(
            num_envs=num_envs, bind=bind, observation_space=spaces[0], action_space=spaces[1], connect_timeout=30
        )
        super().__init__(envs)
        address = envs.address
        command = [str(PROGRAMS[env]), address, "--num-envs", str(num_envs // clients)]
        self._processes = [subprocess.Popen(command, stdin=subprocess.DEVNULL) for _ in range(clients)]

    def close(self, **kwargs) -> None:
        try:
            super().close(**kwargs)
        finally:
            for process in self._processes:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                try:
                    process.wait(5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
            self._directory.cleanup()
