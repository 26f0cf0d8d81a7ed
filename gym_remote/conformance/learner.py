"""A learner in a process of its own, for the lifecycle check of a server that dies:
``python -m gym_remote.conformance.learner ENDPOINT NUM_ENVS LIVENESS_TIMEOUT``.

It serves the probe's spaces at ENDPOINT, resets and steps its clients, prints one JSON line with the
sessions serving its slots, and then waits (at most ``LINGER_SECONDS``) to be killed.
"""

from __future__ import annotations

import json
import sys
import time

from gym_remote.conformance.values import probe_vector

LINGER_SECONDS = 120.0


def main(argv: list[str]) -> int:
    endpoint, num_envs, liveness_timeout = argv[0], int(argv[1]), float(argv[2])
    envs = probe_vector(endpoint, num_envs, liveness_timeout)
    envs.reset(seed=1)
    for _ in range(3):
        envs.step(envs.action_space.sample())
    sessions = sorted({row["session"] for row in envs.stats() if row["served"]})
    sys.stdout.write(json.dumps({"sessions": sessions}) + "\n")
    sys.stdout.flush()
    time.sleep(LINGER_SECONDS)
    envs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
