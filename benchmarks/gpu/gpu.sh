#!/usr/bin/env bash
# One command of a GPU sitting, on the GPU machine (its own torch, no package index, no git), from the repository root:
#   bash benchmarks/gpu/gpu.sh OUT --plan check
#   bash benchmarks/gpu/gpu.sh OUT --plan headline --resume docs/gpu/<sitting>
# OUT is the folder whose files come back from the machine ($OUT there). The budget of the plan (or --budget) counts
# from here: the bundle's install counts. Then `python -m benchmarks.gpu --out OUT ...` (its docstring; docs/gpu.md:
# the plan, in order). Everything this command prints is also in OUT/console.log, which continues the resumed
# folder's (--resume DIR: a folder of docs/gpu/ committed after the last command, that travelled with the tree).
#
# The bundle (benchmarks/gpu/bundle.sh, carried in .whl/) is installed into a folder of its own, put on PYTHONPATH
# before the machine's packages (its torch, jax, numpy are kept); without .whl/ the packages must be installed
# already. The commit comes from LEANRL_COMMIT, else .whl/COMMIT (written by the bundle script), else git where it
# works: the copy of the tree on the GPU machine has no .git.
set -euo pipefail
export LEANRL_SITTING_START=${LEANRL_SITTING_START:-$(date +%s.%N)}
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
  echo "usage: bash benchmarks/gpu/gpu.sh OUT [--plan NAME] [--resume DIR] [options of python -m benchmarks.gpu]" >&2
  exit 2
fi
out=$(realpath -m "$1"); shift
cd "$(dirname "$0")/../.."
mkdir -p "$out"
resume=""
prev=""
for arg in "$@"; do
  [ "$prev" = "--resume" ] && resume=$arg
  case $arg in --resume=*) resume=${arg#--resume=} ;; esac
  prev=$arg
done
if [ -n "$resume" ] && [ ! -d "$resume" ]; then
  echo "gpu.sh: --resume $resume: no such folder (give a folder of docs/gpu/, from the repository root)" >&2
  exit 2
fi
if [ -n "$resume" ] && [ -f "$resume/console.log" ] && [ ! -e "$out/console.log" ]; then
  cp "$resume/console.log" "$out/console.log"  # this command's output continues the sitting's
fi

sitting() {
  echo "=== $(date -u '+%Y-%m-%d %H:%M:%S') UTC: bash benchmarks/gpu/gpu.sh $out $*"
  if [ -z "${LEANRL_COMMIT:-}" ] && [ -f .whl/COMMIT ]; then LEANRL_COMMIT=$(cat .whl/COMMIT); fi
  if [ -z "${LEANRL_COMMIT:-}" ] && command -v git >/dev/null && [ -e .git ]; then
    LEANRL_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || true)
  fi
  export LEANRL_COMMIT=${LEANRL_COMMIT:-unknown}
  if [ -d .whl ]; then
    local site log
    site=$(mktemp -d)/site
    log=$(mktemp)
    if ! python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl \
        >"$log" 2>&1; then
      echo "gpu.sh: the bundle in .whl/ did not install: $(grep -m1 -E '^ERROR' "$log" || tail -1 "$log")"
      return 1
    fi
    if ! tar xzf .whl/envpool-atari.tgz -C "$site" 2>"$log"; then
      echo "gpu.sh: .whl/envpool-atari.tgz did not unpack: $(tail -1 "$log")"
      return 1
    fi
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    echo "gpu.sh: the bundle installed in $(( $(date +%s) - ${LEANRL_SITTING_START%.*} )) s"
  fi
  # the project's own package (leanrl_utils) from this tree, first: `pip install -e .` needs a package index
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  # MuJoCo picks its OpenGL backend from MUJOCO_GL at import; the runs render nothing, and with MUJOCO_GL=egl and
  # no EGL library `import mujoco` fails
  unset MUJOCO_GL
  export PYTHONUNBUFFERED=1
  python3 -m benchmarks.gpu --out "$out" "$@"
}

# under pipefail the command's exit status is the sitting's (tee's is 0), and errexit holds inside it
sitting "$@" 2>&1 | tee -a "$out/console.log"
