"""The scripts of leanrl/: their folder, the pairs, and the loader the benchmarks, the tests and `evals.load_policy`
use, which reaches a script through its declared surface only (the scripts themselves import nothing from here,
and nothing a script calls while it runs loads a script back). It loads a script because the single-file rule
keeps each network, buffer and update in its script and nowhere else: the script is the one definition.

A pair is an algorithm's eager script (the reference) and its optimized twin (`<eager>_torchcompile`); its
family is the pair with its JAX twin (`<eager>_jax`), as CONTRIBUTING.md defines them. A checkpoint saved with
`--save-model` names its family ("algo"), whose eager script's classes rebuild the policy.
"""

import importlib.util
import sys
from pathlib import Path

SCRIPT_DIR = Path(__file__).resolve().parents[1] / "leanrl"
# pair -> its eager script
PAIRS = {"sac": "sac_continuous_action", "td3": "td3_continuous_action", "ppo_continuous": "ppo_continuous_action",
         "ppo_atari": "ppo_atari_envpool", "dqn": "dqn", "dqn_atari": "dqn_atari_envpool"}

# What the benchmarks, the tests and evals.load_policy use of each script, by name: its declared surface. Beyond
# these, a script's insides are its own to change.
EVERY = ("Args", "check_args", "main")
SAC = EVERY + ("make_env", "Actor", "SoftQNetwork")
TD3 = EVERY + ("make_env", "Actor", "QNetwork")
OFF_POLICY_JAX = ("ReplayBuffer", "buffer_init", "buffer_add", "buffer_sample", "make_train_state", "make_update_fns")
PPO_JAX = ("Rollout", "TrainState", "compute_gae", "make_functions", "to_torch_state_dict")
DQN_JAX = ("ReplayBuffer", "StagedSteps", "write", "sample", "to_torch_state_dict", "from_torch_state_dict")
SURFACE: dict[str, tuple[str, ...]] = {
    "sac_continuous_action": SAC + ("ReplayBuffer",),
    "sac_continuous_action_torchcompile": SAC + ("ReplayBuffer", "COMPILED_ACTING"),
    "sac_continuous_action_jax": SAC + OFF_POLICY_JAX,
    "td3_continuous_action": TD3 + ("ReplayBuffer",),
    "td3_continuous_action_torchcompile": TD3 + ("ReplayBuffer", "COMPILED_ACTING"),
    "td3_continuous_action_jax": TD3 + OFF_POLICY_JAX,
    "ppo_continuous_action": EVERY + ("make_envs", "Agent", "compute_gae"),
    "ppo_continuous_action_torchcompile": EVERY + ("make_envs", "Agent", "gae_deltas", "gae_chunk", "chunk_size"),
    "ppo_continuous_action_jax": EVERY + ("make_envs", "Agent") + PPO_JAX,
    "ppo_atari_envpool": EVERY + ("make_envs", "Agent", "EpisodeStats", "compute_gae"),
    "ppo_atari_envpool_torchcompile": EVERY + ("make_envs", "Agent", "EpisodeStats", "EnvHalves"),
    "ppo_atari_envpool_jax": EVERY + ("make_envs", "Agent", "EpisodeStats") + PPO_JAX,
    "ppo_atari_envpool_multigpu": EVERY,
    "ppo_atari_envpool_multigpu_torchcompile": EVERY,
    "dqn": EVERY + ("make_env", "QNetwork"),
    "dqn_torchcompile": EVERY + ("make_env", "QNetwork", "COMPILED_ACTING"),
    "dqn_jax": EVERY + ("make_env", "QNetwork") + DQN_JAX,
    "dqn_atari_envpool": EVERY + ("make_envs", "QNetwork", "EpisodeStats", "ReplayBuffer"),
    "dqn_atari_envpool_torchcompile": EVERY + ("ReplayBuffer", "COMPILED_ACTING"),
    "dqn_atari_envpool_jax": EVERY + ("make_envs", "QNetwork", "write_obs", "stacks") + DQN_JAX,
}


class Script:
    """A script of leanrl/ through its declared surface (SURFACE): its declared names can be read, and set (a
    test's monkeypatch); any other name is refused, so that a script's insides can change without breaking a
    caller nobody knew of. No `__dict__` of its own: monkeypatch then restores what it replaced, not deletes it."""

    __slots__ = ("name", "module")

    def __init__(self, name: str, module):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "module", module)

    def _declared(self, attr: str) -> str:
        if attr not in SURFACE[self.name]:
            raise AttributeError(f"{attr!r} is not in the declared surface of leanrl/{self.name}.py "
                                 "(SURFACE in leanrl_utils/scripts.py)")
        return attr

    def __getattr__(self, attr):
        return getattr(self.module, self._declared(attr))

    def __setattr__(self, attr, value):
        setattr(self.module, self._declared(attr), value)

    def __delattr__(self, attr):
        delattr(self.module, self._declared(attr))


def load_script(name: str) -> Script:
    """A script of leanrl/, through its declared surface, its module built once per process (its training loop
    runs only under __main__). The module is registered in sys.modules before it runs: compiled code looks its
    globals up there."""
    if name not in SURFACE:
        raise KeyError(f"leanrl/{name}.py: no such script, or one without a declared surface (SURFACE)")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPT_DIR / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return Script(name, sys.modules[name])
