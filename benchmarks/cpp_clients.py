"""RemoteVectorEnv served by C++ client processes (clients/cpp), for the suite's rows next to the Python
client. Build the client first: ``cmake -S clients/cpp -B clients/cpp/build && cmake --build clients/cpp/build``.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
from pathlib import Path

import gymnasium as gym

from gym_remote import RemoteVectorEnv, client

BUILD = Path(__file__).resolve().parent.parent / "clients" / "cpp" / "build"
PROGRAMS = {"cartpole": BUILD / "gym_remote_cartpole_client", "null": BUILD / "gym_remote_null_client"}
"""The C++ CartPole-v1, and the zero-cost env of ``bench_envs.NullEnv``."""


SPIN = client.DEFAULT_SPIN_SECONDS
"""The client spin over the data plane: the local Python clients' while their learner spins."""


def available() -> bool:
    return all(program.exists() for program in PROGRAMS.values())


class CppClients(gym.vector.VectorWrapper):
    """A RemoteVectorEnv of ``num_envs`` slots on ``spaces`` at an ipc or tcp address, served by ``clients``
    C++ client processes serving ``env`` (a key of PROGRAMS), over the data plane (``transport="uds"``,
    the ZeroMQ address ipc; the clients spin :data:`SPIN`) or ZeroMQ alone; closing it ends them, by pid."""

    def __init__(
        self, env: str, spaces: tuple[gym.Space, gym.Space], num_envs: int, clients: int, transport: str = "uds"
    ) -> None:
        if num_envs % clients:
            raise ValueError(f"{num_envs} envs do not split evenly over {clients} clients")
        self._directory = tempfile.TemporaryDirectory(prefix="gym-remote-bench-cpp-")
        bind = "tcp://127.0.0.1:*" if transport == "tcp" else f"ipc://{self._directory.name}/server"
        data_plane = transport == "uds"
        envs = RemoteVectorEnv(
            num_envs=num_envs,
            bind=bind,
            observation_space=spaces[0],
            action_space=spaces[1],
            connect_timeout=30,
            data_plane=data_plane,
        )
        super().__init__(envs)
        address = envs.address
        command = [str(PROGRAMS[env]), address, "--num-envs", str(num_envs // clients)]
        # over the data plane it spins as the local Python clients of a spinning learner do
        command += ["--spin", str(SPIN)] if data_plane else ["--no-data-plane"]
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
