"""What the benchmarks (and the tests) share: the scripts of leanrl/ as modules, and one timing helper."""

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "leanrl"


def load_script(name: str):
    """A script of leanrl/ as a module, built once per process (its training loop only runs under
    __main__). It is registered in sys.modules: compiled code looks its globals up there."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
