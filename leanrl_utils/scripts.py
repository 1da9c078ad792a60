"""The scripts of leanrl/: their folder, the pairs, and one loader, shared by evals.py, the benchmarks and
the tests (the scripts themselves import nothing from here). It loads a script back because the single-file
rule keeps each network, buffer and update in its script and nowhere else: the script is the one definition.

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


def load_script(name: str):
    """A script of leanrl/ as a module, built once per process (its training loop runs only under
    __main__). It is registered in sys.modules before it runs: compiled code looks its globals up there."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPT_DIR / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
