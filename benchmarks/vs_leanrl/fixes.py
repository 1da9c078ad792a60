"""LeanRL's optimized scripts, fixed only to run on today's libraries, copied out of a LeanRL checkout: what
benchmarks/vs_leanrl/vs_leanrl.py and the GPU sitting's `leanrl` plan (benchmarks/gpu/gpu.py) run as LeanRL. LeanRL's code stays
outside this repository: this file holds the fixes alone, each a few lines of LeanRL replaced, with why.

    python -m benchmarks.vs_leanrl.fixes LEANRL DEST

LEANRL is a clean checkout of github.com/pytorch-labs/LeanRL (commit 8dbb633, its last, was the one tried). DEST
receives leanrl/<script>.py for each script below, fixed; wandb.py, the stand-in for Weights & Biases
(benchmarks/vs_leanrl/wandb.py: the GPU machine has no wandb, and LeanRL logs only there); and FIXES.json: the
checkout's commit, whether it had local changes, and every fix applied, by script. A fix whose lines are not found
exactly once stops it in one line, exit code 1: another LeanRL commit needs its fixes looked at again.

The fixes (docs/vs_leanrl.md lists them too), each where a script stopped, on gymnasium 1.x, envpool 1.x and
tensordict 0.15; LeanRL's algorithms, defaults, compile usage and speed measurement are left as they are:
- gymnasium 1.x's vector environments reset an environment on the step after its end unless asked otherwise; the
  scripts were written for a reset in the same step, which is asked for, and read `final_info` in gymnasium 1.x's
  layout (a dict of arrays, with a mask) and its `final_obs` key;
- continuous PPO: gymnasium 1.x's `TransformObservation` takes the observation space (clipping keeps it);
- PPO Atari: gymnasium in place of gym; its episode-statistics wrapper takes envpool 1.x's `reset` (observations and
  infos) and its 5-tuple `step`; envpool's `num_envs` and single spaces are read-only there, and no longer assigned;
- tensordict 0.15: `to_module` re-wraps the weights it puts into a module as parameters that require grad unless
  told `preserve_module_state=False`: without it the acting copy's outputs require grad (and `.numpy()` fails);
- SAC: tensordict 0.15's `TensorDictModule` refuses a function that returns more outputs than `out_keys` names: the
  policy's three outputs are named.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

SAME_STEP = ("gymnasium 1.x: same-step autoreset asked for",
             "gym.vector.SyncVectorEnv([make_env(args.env_id, args.seed, 0, args.capture_video, run_name)])",
             "gym.vector.SyncVectorEnv([make_env(args.env_id, args.seed, 0, args.capture_video, run_name)],\n"
             "                                 autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)")
FINAL_INFO = ("gymnasium 1.x: `final_info` is a dict of arrays with a mask",
              '        if "final_info" in infos:\n            for info in infos["final_info"]:\n',
              '        if "final_info" in infos:\n'
              '            for r in infos["final_info"]["episode"]["r"][infos["final_info"]["_episode"]]:\n'
              '                info = {"episode": {"r": r}}\n')
DETACHED = ("tensordict 0.15: the acting copy's weights put in with preserve_module_state=False",
            "from_module(actor).data.to_module(actor_detach)",
            "from_module(actor).data.to_module(actor_detach, preserve_module_state=False)")
PPO_DETACHED = ("tensordict 0.15: the acting copy's weights put in with preserve_module_state=False",
                "agent_inference_p.to_module(agent_inference)",
                "agent_inference_p.to_module(agent_inference, preserve_module_state=False)")

# script -> its fixes: (why, LeanRL's lines, what replaces them), each found exactly once
FIXES = {
    "sac_continuous_action_torchcompile": [
        SAME_STEP, FINAL_INFO,
        ("gymnasium 1.x: the final observation is `final_obs`",
         'infos["final_observation"][idx]', 'infos["final_obs"][idx]'),
        DETACHED,
        ("tensordict 0.15: `out_keys` names the three outputs the policy returns",
         'in_keys=["observation"], out_keys=["action"])',
         'in_keys=["observation"], out_keys=["action", "log_prob", "mean"])'),
        ("tensordict 0.15: the policy called on a tensor returns its three outputs; the action is the first",
         "            actions = policy(obs)\n", "            actions = policy(obs)[0]\n"),
    ],
    "td3_continuous_action_torchcompile": [
        SAME_STEP, FINAL_INFO,
        ("gymnasium 1.x: the final observation is `final_obs`",
         '        if "final_observation" in infos:\n'
         '            real_next_obs[truncations] = torch.as_tensor(\n'
         '                np.asarray(list(infos["final_observation"][truncations]),',
         '        if "final_obs" in infos and truncations.any():\n'
         '            real_next_obs[truncations] = torch.as_tensor(\n'
         '                np.asarray(list(infos["final_obs"][truncations]),'),
        DETACHED,
    ],
    "ppo_continuous_action_torchcompile": [
        ("gymnasium 1.x: same-step autoreset asked for",
         "[make_env(args.env_id, i, args.capture_video, run_name, args.gamma) for i in range(args.num_envs)]\n    )",
         "[make_env(args.env_id, i, args.capture_video, run_name, args.gamma) for i in range(args.num_envs)],\n"
         "        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,\n    )"),
        FINAL_INFO,
        ("gymnasium 1.x: `TransformObservation` takes the observation space",
         "gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10))",
         "gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)"),
        PPO_DETACHED,
    ],
    "dqn_torchcompile": [
        ("gymnasium 1.x: same-step autoreset asked for",
         "[make_env(args.env_id, args.seed + i, i, args.capture_video, run_name) for i in range(args.num_envs)]\n    )",
         "[make_env(args.env_id, args.seed + i, i, args.capture_video, run_name) for i in range(args.num_envs)],\n"
         "        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,\n    )"),
        FINAL_INFO,
        ("gymnasium 1.x: the final observation is `final_obs`",
         'infos["final_observation"][idx]', 'infos["final_obs"][idx]'),
        ("tensordict 0.15: the acting copy's weights put in with preserve_module_state=False",
         "params_vals.to_module(q_network_detach)", "params_vals.to_module(q_network_detach, preserve_module_state=False)"),
    ],
    "ppo_atari_envpool_torchcompile": [
        ("gymnasium in place of gym", "# import gymnasium as gym\nimport gym\n", "import gymnasium as gym\n"),
        ("envpool 1.x: the wrapper takes `reset`'s observations and infos, and gives the script the observations",
         "        observations = super().reset(**kwargs)\n",
         "        observations, _ = super().reset(**kwargs)\n"),
        ("envpool 1.x: the wrapper takes the 5-tuple `step`, and gives the script the 4-tuple",
         "        observations, rewards, dones, infos = super().step(action)\n",
         "        observations, rewards, terminations, truncations, infos = super().step(action)\n"
         "        dones = terminations | truncations\n"),
        ("envpool 1.x: `num_envs` and the single spaces are read-only; the spaces are set on the wrapper instead",
         "    envs.num_envs = args.num_envs\n    envs.single_action_space = envs.action_space\n"
         "    envs.single_observation_space = envs.observation_space\n    envs = RecordEpisodeStatistics(envs)\n",
         "    envs = RecordEpisodeStatistics(envs)\n    envs.single_action_space = envs.action_space\n"
         "    envs.single_observation_space = envs.observation_space\n"),
        PPO_DETACHED,
    ],
}


def fix(text: str, fixes: list[tuple[str, str, str]], script: str) -> str:
    for why, old, new in fixes:
        if text.count(old) != 1:
            raise SystemExit(f"vs_leanrl_fixes: {script}: the lines of the fix {why!r} are found "
                             f"{text.count(old)} times, not once: the fixes were written for another LeanRL")
        text = text.replace(old, new)
    return text


def git(checkout: Path, *args) -> str:
    proc = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def build(checkout: Path, dest: Path) -> dict:
    """DEST/leanrl/<script>.py fixed, DEST/wandb.py, DEST/FIXES.json (returned)."""
    if not (checkout / "leanrl").is_dir():
        raise SystemExit(f"vs_leanrl_fixes: {checkout}: not a LeanRL checkout (no leanrl/ folder)")
    (dest / "leanrl").mkdir(parents=True, exist_ok=True)
    for script, fixes in FIXES.items():
        text = (checkout / "leanrl" / f"{script}.py").read_text()
        (dest / "leanrl" / f"{script}.py").write_text(fix(text, fixes, script))
    shutil.copyfile(HERE / "wandb.py", dest / "wandb.py")
    state = {"commit": git(checkout, "rev-parse", "HEAD") or "unknown (not a git checkout)",
             "local changes": git(checkout, "status", "--porcelain", "--untracked-files=no").splitlines(),
             "fixes": {script: [why for why, _, _ in fixes] for script, fixes in FIXES.items()},
             "fixed by": "benchmarks/vs_leanrl/fixes.py"}
    (dest / "FIXES.json").write_text(json.dumps(state, indent=1) + "\n")
    return state


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0].startswith("-"):
        print("usage: python -m benchmarks.vs_leanrl.fixes LEANRL DEST", file=sys.stderr)
        sys.exit(2)
    state = build(Path(argv[0]), Path(argv[1]))
    changes = state["local changes"]
    print(f"LeanRL {state['commit'][:7]}: {len(FIXES)} scripts fixed into {argv[1]}"
          + (f" (the checkout has local changes: {', '.join(changes)})" if changes else ""))


if __name__ == "__main__":
    main()
