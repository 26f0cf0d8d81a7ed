"""PPO on CartPole, one file in the style of CleanRL, with the envs stepped by gym_remote.

Read it top to bottom: arguments, the vector env (the one line that differs from a SyncVectorEnv
script), the agent, then the loop of rollouts and updates. Needs torch
(``pip install ".[examples]"`` from a clone, after the torch build of your choice).

    python examples/cleanrl_ppo.py                        # 500k steps, a minute or two on 2 cores
    python examples/cleanrl_ppo.py --total-timesteps 4096 # a quick look
    python examples/cleanrl_ppo.py --bind tcp://127.0.0.1:5555  # clients you start yourself, e.g. the
        # C++ CartPole: clients/cpp/build/gym_remote_cartpole_client tcp://127.0.0.1:5555 --num-envs 4

It prints the mean return of the last 20 episodes after every update; with the defaults it ended
at 480 (seed 1) on a 2-core VM. With ``--tensorboard runs/ppo`` (needs ``pip install tensorboard``) it
also writes the training curves and, next to them, the fleet's figures (``fleet/...``: slots served,
losses, rejoins, env-steps/s, step latency) to TensorBoard. For a script written for Gymnasium
0.29's info layout, see the ``final_info_format="legacy"`` option of RemoteVectorEnv.
"""

from __future__ import annotations

import argparse
import random
import time
from collections import deque

import gymnasium as gym
import numpy as np
import torch
from torch import nn, optim
from torch.distributions import Categorical

from gym_remote import RemoteVectorEnv
from gym_remote.fleet import fleet_summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="PPO on CartPole with RemoteVectorEnv")
    parser.add_argument("--env-id", default="CartPole-v1")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--total-timesteps", type=int, default=500_000)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-clients", type=int, default=1, help="local env processes")
    parser.add_argument(
        "--bind", help="serve --num-envs slots at this address to clients started elsewhere (default: local ones)"
    )
    parser.add_argument("--num-steps", type=int, default=128, help="steps per env in each rollout")
    parser.add_argument("--learning-rate", type=float, default=2.5e-4)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--gae-lambda", type=float, default=0.95)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--update-epochs", type=int, default=4)
    parser.add_argument("--clip-coef", type=float, default=0.2)
    parser.add_argument("--ent-coef", type=float, default=0.01)
    parser.add_argument("--vf-coef", type=float, default=0.5)
    parser.add_argument("--max-grad-norm", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--tensorboard", metavar="DIR", help="write the curves and the fleet's figures here")
    return parser.parse_args(argv)


def make_env(env_id: str):
    def thunk() -> gym.Env:
        return gym.make(env_id)

    return thunk


def layer(in_features: int, out_features: int, std: float = np.sqrt(2)) -> nn.Linear:
    linear = nn.Linear(in_features, out_features)
    nn.init.orthogonal_(linear.weight, std)
    nn.init.constant_(linear.bias, 0.0)
    return linear


class Agent(nn.Module):
    def __init__(self, observation_size: int, num_actions: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            layer(observation_size, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, std=1.0)
        )
        self.actor = nn.Sequential(
            layer(observation_size, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, num_actions, std=0.01)
        )

    def value(self, observations: torch.Tensor) -> torch.Tensor:
        return self.critic(observations).squeeze(-1)

    def act(self, observations: torch.Tensor, actions: torch.Tensor | None = None):
        distribution = Categorical(logits=self.actor(observations))
        if actions is None:
            actions = distribution.sample()
        return actions, distribution.log_prob(actions), distribution.entropy(), self.value(observations)


def train(args: argparse.Namespace) -> float:
    """Train; return the mean episodic return of the last 20 episodes."""
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    # The one line that differs from a SyncVectorEnv script: the envs run in client processes.
    if args.bind is None:
        env_fns = [make_env(args.env_id) for _ in range(args.num_envs)]
        envs = RemoteVectorEnv(env_fns, num_clients=args.num_clients, autoreset_mode="SameStep")
    else:  # clients in any language join at args.bind; their spaces must be env_id's
        reference = gym.make(args.env_id)
        envs = RemoteVectorEnv(
            num_envs=args.num_envs,
            bind=args.bind,
            observation_space=reference.observation_space,
            action_space=reference.action_space,
            autoreset_mode="SameStep",
        )
    remote = envs  # (for its fleet's figures)
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    assert isinstance(envs.single_action_space, gym.spaces.Discrete), "only discrete actions"

    agent = Agent(int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n))
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = max(1, args.total_timesteps // batch_size)
    observations = torch.zeros((args.num_steps, args.num_envs, *envs.single_observation_space.shape))
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long)
    log_probs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs))

    writer = None
    if args.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(args.tensorboard)
        remote.status()  # (the fleet's episodes count from its first status on)
    returns_seen: deque[float] = deque(maxlen=20)
    global_step, started = 0, time.time()
    next_observation = torch.tensor(envs.reset(seed=args.seed)[0], dtype=torch.float32)
    next_done = torch.zeros(args.num_envs)
    try:
        for iteration in range(1, num_iterations + 1):
            for group in optimizer.param_groups:  # learning rate annealed to 0
                group["lr"] = (1.0 - (iteration - 1.0) / num_iterations) * args.learning_rate

            for step in range(args.num_steps):
                global_step += args.num_envs
                observations[step], dones[step] = next_observation, next_done
                with torch.no_grad():
                    action, log_prob, _, value = agent.act(next_observation)
                actions[step], log_probs[step], values[step] = action, log_prob, value
                # SameStep autoreset: an env whose episode ended is already reset in this observation
                observation, reward, terminations, truncations, infos = envs.step(action.numpy())
                rewards[step] = torch.tensor(reward, dtype=torch.float32)
                next_observation = torch.tensor(observation, dtype=torch.float32)
                next_done = torch.tensor(np.logical_or(terminations, truncations), dtype=torch.float32)
                if "episode" in infos:
                    for episodic_return in infos["episode"]["r"][infos["_episode"]]:
                        returns_seen.append(float(episodic_return))

            with torch.no_grad():  # advantages by GAE, bootstrapped from the value after the rollout
                next_value = agent.value(next_observation)
                advantages = torch.zeros_like(rewards)
                last = torch.zeros(args.num_envs)
                for step in reversed(range(args.num_steps)):
                    if step == args.num_steps - 1:
                        not_done, following = 1.0 - next_done, next_value
                    else:
                        not_done, following = 1.0 - dones[step + 1], values[step + 1]
                    delta = rewards[step] + args.gamma * following * not_done - values[step]
                    last = delta + args.gamma * args.gae_lambda * not_done * last
                    advantages[step] = last
                targets = advantages + values

            flat = {
                "observations": observations.reshape((-1, *envs.single_observation_space.shape)),
                "actions": actions.reshape(-1),
                "log_probs": log_probs.reshape(-1),
                "advantages": advantages.reshape(-1),
                "targets": targets.reshape(-1),
                "values": values.reshape(-1),
            }
            for _ in range(args.update_epochs):
                order = np.random.permutation(batch_size)
                for start in range(0, batch_size, minibatch_size):
                    chosen = order[start : start + minibatch_size]
                    _, new_log_prob, entropy, new_value = agent.act(
                        flat["observations"][chosen], flat["actions"][chosen]
                    )
                    ratio = (new_log_prob - flat["log_probs"][chosen]).exp()
                    advantage = flat["advantages"][chosen]
                    advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
                    policy_loss = torch.max(
                        -advantage * ratio, -advantage * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
                    ).mean()
                    clipped_value = flat["values"][chosen] + (new_value - flat["values"][chosen]).clamp(
                        -args.clip_coef, args.clip_coef
                    )
                    value_loss = (
                        0.5
                        * torch.max(
                            (new_value - flat["targets"][chosen]) ** 2, (clipped_value - flat["targets"][chosen]) ** 2
                        ).mean()
                    )
                    loss = policy_loss - args.ent_coef * entropy.mean() + args.vf_coef * value_loss
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                    optimizer.step()

            recent = float(np.mean(returns_seen)) if returns_seen else float("nan")
            if writer is not None:
                writer.add_scalar("charts/mean_return_last_20", recent, global_step)
                writer.add_scalar("losses/value_loss", value_loss.item(), global_step)
                for key, figure in fleet_summary(remote.status()).items():
                    writer.add_scalar(f"fleet/{key}", figure, global_step)
            print(
                f"step {global_step:>7d}  mean return (last {len(returns_seen)} episodes) {recent:7.1f}  "
                f"{global_step / (time.time() - started):,.0f} steps/s",
                flush=True,
            )
    finally:
        envs.close()
        if writer is not None:
            writer.close()
    return float(np.mean(returns_seen)) if returns_seen else float("nan")


if __name__ == "__main__":
    final = train(parse_args())
    print(f"mean episodic return of the last 20 episodes: {final:.1f}")
