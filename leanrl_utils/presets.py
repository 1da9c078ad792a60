"""The script pairs of run.sh and its presets (leanrl_utils/presets.json), for run.sh and the report.

    python -m leanrl_utils.presets pairs          # bash declarations of the pairs, for run.sh
    python -m leanrl_utils.presets preset cpu     # bash declarations of a preset, for run.sh
"""

import json
import shlex
import sys
from pathlib import Path

from leanrl_utils.scripts import PAIRS  # pair -> its eager script

PRESETS = Path(__file__).with_name("presets.json")
MODES = ["eager", "none", "compile", "cudagraphs", "compile+cudagraphs", "jax"]


def read() -> dict:
    """Every preset of presets.json, by name, as written there."""
    return json.loads(PRESETS.read_text())


def load(name: str) -> dict:
    presets = read()
    if name not in presets:
        raise SystemExit(f"run.sh: error: --preset: unknown preset {name!r}; choose among: {', '.join(presets)}")
    preset = presets[name]
    for pair, spec in preset["pairs"].items():
        if pair not in PAIRS or not {"args", "threshold", "why"} <= set(spec):
            raise SystemExit(f"presets.json: preset {name!r}: pair {pair!r} needs a known name, args, threshold, why")
    if not set(preset["modes"]) <= set(MODES):
        raise SystemExit(f"presets.json: preset {name!r}: modes must be among {MODES}")
    return {"name": name, **preset}


def thresholds(preset: dict) -> dict[str, float]:
    """Eager script name -> the return that means the run learned its task."""
    return {PAIRS[pair]: spec["threshold"] for pair, spec in preset["pairs"].items()}


def bash_array(name: str, items) -> str:
    return f"{name}=({' '.join(shlex.quote(str(i)) for i in items)})"


def bash_assoc(name: str, mapping: dict) -> str:
    return f"declare -A {name}=(" + " ".join(f"[{k}]={shlex.quote(str(v))}" for k, v in mapping.items()) + ")"


def main():
    if sys.argv[1:] == ["pairs"]:
        print(bash_array("PAIRS", PAIRS))
        print(bash_assoc("EAGER", PAIRS))
    elif len(sys.argv) == 3 and sys.argv[1] == "preset":
        preset = load(sys.argv[2])
        print(bash_array("PRESET_PAIRS", preset["pairs"]))
        print(bash_array("PRESET_MODES", preset["modes"]))
        print(bash_assoc("PRESET_ARGS", {p: s["args"] for p, s in preset["pairs"].items()}))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
