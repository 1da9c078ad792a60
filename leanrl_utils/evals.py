"""Play a policy, and load back one saved with `--save-model` (CleanRL's `cleanrl_utils/evals`).

A script's `--save-model` plays its trained policy with `play`: the script hands over an environment it made
and its own way to act (`act`, the algorithm's evaluation rule: SAC's mean action, DQN's ε-greedy choice),
and nothing here loads a script. A checkpoint names its family; `load_policy` and `evaluate` rebuild the
policy from a checkpoint with the eager script's classes, through the declared loader (scripts.load_script),
for the tests and benchmarks, so a model saved by any script of a family loads the same way.

    from leanrl_utils.evals import load_policy, evaluate      # the project's package: pip install -e .
    policy, args = load_policy("runs/<run>/sac_continuous_action.pt")[:2]
    returns = evaluate("runs/<run>/sac_continuous_action.pt", eval_episodes=5)

or from the command line, its returns said in one line:

    python -m leanrl_utils.evals runs/<run>/sac_continuous_action.pt --episodes 5

A file that cannot be read as a checkpoint, or is not one of this project's, is refused in one line naming it
(`CheckpointError`; exit code 2 on the command line).
"""

import random

import gymnasium as gym
import numpy as np
import torch

from leanrl_utils.scripts import PAIRS, load_script

EVAL_EPSILON = 0.05  # DQN plays ε-greedy with a small ε, as CleanRL's evaluation does


class CheckpointError(ValueError):
    """A file given as a checkpoint that cannot be read as one, or is not one of this project's."""


def read_checkpoint(model_path: str, device: str | torch.device = "cpu") -> dict:
    """A checkpoint saved by a script's --save-model, read back; a file that is none refused in one line."""
    try:
        checkpoint = torch.load(model_path, map_location=device, weights_only=True)
    except Exception as err:  # a missing file, a truncated one, another format: torch's reader says it many ways
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{model_path}: cannot be read as a checkpoint ({why[:200]})") from None
    if not isinstance(checkpoint, dict) or checkpoint.get("algo") not in PAIRS or "args" not in checkpoint:
        raise CheckpointError(f"{model_path}: not a checkpoint of this project (a script's --save-model writes one, "
                              f"naming its family: {', '.join(PAIRS)})")
    return checkpoint


def load_policy(model_path: str, device: str | torch.device = "cpu"):
    """Rebuild the network that acts: returns (policy, the run's args as a dict, extra), where `extra`
    holds the observation-normalization statistics for continuous PPO and is None otherwise."""
    return _load(read_checkpoint(model_path, device), device)


# per algorithm: the environment its policy is built for (from the run's saved args), the eager script's
# class of that policy, and the policy's key in the checkpoint
POLICIES = {
    "sac": (lambda m, a: m.make_env(a["env_id"], seed=0), "Actor", "actor"),
    "td3": (lambda m, a: m.make_env(a["env_id"], seed=0), "Actor", "actor"),
    "dqn": (lambda m, a: m.make_env(a["env_id"], seed=0), "QNetwork", "q_network"),
    "ppo_continuous": (lambda m, a: m.make_envs(m.Args(env_id=a["env_id"], gamma=a["gamma"]), "", num_envs=1),
                       "Agent", "agent"),
    "dqn_atari": (lambda m, a: m.make_envs(m.Args(env_id=a["env_id"])), "QNetwork", "q_network"),
    "ppo_atari": (lambda m, a: m.make_envs(m.Args(env_id=a["env_id"]), num_envs=1), "Agent", "agent"),
}


def _load(checkpoint: dict, device):
    algo, saved = checkpoint["algo"], checkpoint["args"]
    module = load_script(PAIRS[algo])
    make_env, cls, key = POLICIES[algo]
    env = make_env(module, saved)
    policy = getattr(module, cls)(env)
    policy.load_state_dict(checkpoint[key])
    env.close()
    return policy.to(device).eval(), saved, checkpoint.get("obs_rms")


def freeze_normalization(envs: gym.vector.SyncVectorEnv, obs_rms: dict) -> None:
    """Load the training statistics into each env's NormalizeObservation wrapper and stop it updating
    them. (`set_wrapper_attr("update_running_mean", False)` would stop at the first wrapper with that
    attribute, NormalizeReward, and leave the observation statistics drifting.)"""
    for env in envs.envs:
        while not isinstance(env, gym.wrappers.NormalizeObservation):
            env = env.env
        env.obs_rms.mean, env.obs_rms.var = obs_rms["mean"].double().numpy(), obs_rms["var"].double().numpy()
        env.obs_rms.count = float(obs_rms["count"])
        env.update_running_mean = False


def epsilon_greedy(greedy, explore, seed: int):
    """DQN's evaluation rule (CleanRL's): `explore()`, a random action, with probability EVAL_EPSILON (drawn from
    its own random.Random(seed)), else `greedy(obs)`: the act function `play` takes."""
    rng = random.Random(seed)
    return lambda obs: explore() if rng.random() < EVAL_EPSILON else greedy(obs)


def play(env, act, episodes: int, seed: int, stats=None) -> list[float]:
    """Play `episodes` episodes with `act` (observations -> actions, numpy in and out, called without gradients)
    and return their returns, said in one line (their mean, spread and range). `env` is one gymnasium
    environment with episode statistics, or a gymnasium vector environment (same-step autoreset: a finished
    episode comes in `final_info`), or, with `stats` (the script's EpisodeStats), an envpool one, whose whole
    games (unclipped rewards) are counted."""
    returns = []
    with torch.no_grad():
        if stats is not None:  # envpool: its games counted by the script's EpisodeStats
            env.single_action_space.seed(seed)
            obs, _ = env.reset()
            while len(returns) < episodes:
                obs, _, terminated, truncated, info = env.step(act(obs))
                returns += [r for _, r, _ in stats.update(info, terminated, truncated)]
        elif not isinstance(env, gym.vector.VectorEnv):  # one environment (envpool's pools are gym.Envs too)
            obs, _ = env.reset(seed=seed)
            while len(returns) < episodes:
                obs, _, _, _, info = env.step(act(obs))
                if "episode" in info:
                    returns.append(float(info["episode"]["r"]))
                    obs, _ = env.reset()
        else:
            obs, _ = env.reset(seed=seed)
            while len(returns) < episodes:
                obs, _, _, _, infos = env.step(act(obs))
                if "final_info" in infos and "episode" in infos["final_info"]:
                    finished = infos["final_info"]["_episode"]
                    returns += [float(r) for r in infos["final_info"]["episode"]["r"][finished]]
    env.close()
    returns = returns[:episodes]
    print(f"evaluation: {len(returns)} episodes, return {np.mean(returns):.1f} ± {np.std(returns):.1f} "
          f"(min {min(returns):.1f}, max {max(returns):.1f})")
    return returns


def evaluate(model_path: str, eval_episodes: int = 10, seed: int = 0, device: str | torch.device = "cpu"):
    """Play `eval_episodes` episodes with the saved policy, rebuilt with the eager script's network; returns
    their returns. SAC acts with its mean action, TD3 with its exploration noise and DQN ε-greedily with
    ε = 0.05 (as CleanRL's evaluations do), continuous PPO with its mean action under the frozen training
    normalization; Atari PPO samples its actions (as in training); Atari DQN plays ε-greedily too; both count
    whole games. For the tests and benchmarks: a script plays its own trained policy with `play`."""
    checkpoint = read_checkpoint(model_path, device)
    policy, saved, obs_rms = _load(checkpoint, device)
    algo, module = checkpoint["algo"], load_script(PAIRS[checkpoint["algo"]])

    def x(obs, **kwargs):
        return torch.as_tensor(obs, device=device, **kwargs)

    if algo in ("sac", "td3", "dqn"):
        env = module.make_env(saved["env_id"], seed)
        one = lambda obs: x(obs, dtype=torch.float32)[None]  # noqa: E731
        if algo == "sac":
            act = lambda obs: policy.get_action(one(obs))[2][0].cpu().numpy()  # noqa: E731
        elif algo == "td3":
            noise = policy.action_scale * saved["exploration_noise"]
            act = lambda obs: (policy(one(obs))[0] + torch.normal(0, noise)).cpu().numpy().clip(  # noqa: E731
                env.action_space.low, env.action_space.high)
        else:
            act = epsilon_greedy(lambda obs: policy(one(obs)).argmax().item(), env.action_space.sample, seed)
        return play(env, act, eval_episodes, seed)
    if algo == "ppo_continuous":
        env = module.make_envs(module.Args(env_id=saved["env_id"], gamma=saved["gamma"]), "", num_envs=1)
        freeze_normalization(env, obs_rms)
        return play(env, lambda obs: policy.actor_mean(x(obs, dtype=torch.float32)).cpu().numpy(), eval_episodes, seed)
    env = module.make_envs(module.Args(env_id=saved["env_id"]), num_envs=1, seed=seed)  # Atari: whole games
    if algo == "ppo_atari":
        act = lambda obs: policy.get_action_and_value(x(obs))[0].cpu().numpy()  # noqa: E731
    else:
        act = epsilon_greedy(lambda obs: policy(x(obs)).argmax(dim=1).cpu().numpy(),
                             lambda: np.array([env.single_action_space.sample()]), seed)
    return play(env, act, eval_episodes, seed, stats=module.EpisodeStats(1))


def main(argv: list[str] | None = None) -> None:
    """python -m leanrl_utils.evals CHECKPOINT [--episodes N] [--seed S]: play a saved policy (`evaluate`)."""
    import argparse

    from leanrl_utils import harness

    parser = argparse.ArgumentParser(prog="python -m leanrl_utils.evals", description=main.__doc__)
    parser.add_argument("checkpoint", help="a checkpoint a script's --save-model wrote (runs/<run>/<script>.pt)")
    parser.add_argument("--episodes", type=int, default=10, help="episodes to play (> 0)")
    parser.add_argument("--seed", type=int, default=0, help="the environment's seed")
    given = parser.parse_args(argv)
    if given.episodes <= 0:
        harness.fail(f"--episodes must be positive, got {given.episodes}")
    try:
        evaluate(given.checkpoint, given.episodes, given.seed)
    except CheckpointError as err:
        harness.fail(str(err))


if __name__ == "__main__":
    main()
