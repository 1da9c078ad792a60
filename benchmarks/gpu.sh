#!/usr/bin/env bash
# A GPU sitting in one command, on a GPU machine that has its own torch and may have no package index:
#   bash benchmarks/gpu.sh docs/gpu/<gpu>_<date> [--parts tests,main,speed,learn] [--budget SECONDS] ...
# The bundle that benchmarks/gpu_bundle.sh built where an index is reachable (.whl/, copied beside the
# checkout) is installed into a folder of its own and put on PYTHONPATH (the machine's torch, jax and numpy are
# kept); then `python -m benchmarks.gpu --out DIR ...` runs the parts (see its docstring). Without .whl/, the
# packages must be installed already.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] && [ "${1#-}" = "$1" ] || { echo "usage: bash benchmarks/gpu.sh OUT_DIR [options of python -m benchmarks.gpu]" >&2; exit 2; }
out=$1; shift
if [ -d .whl ]; then
  site=$(mktemp -d)/site
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl
  tar xzf .whl/envpool-atari.tgz -C "$site"
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
# the project's own package (leanrl_utils) from this checkout: `pip install -e .` needs a package index for its
# build tools, which such a machine may not have
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# MuJoCo picks its OpenGL backend from MUJOCO_GL at import; the runs here render nothing, and a machine without
# the EGL library fails to import mujoco at all with MUJOCO_GL=egl
unset MUJOCO_GL
exec python3 -m benchmarks.gpu --out "$out" "$@"
