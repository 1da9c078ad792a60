#!/usr/bin/env bash
# Build the offline bundle of what the GPU machine lacks, for its Python 3.12 on x86-64 Linux (its own torch, jax,
# numpy, tensorboard, tqdm and pytest are kept), then check that the tree and the bundle travel with room to spare.
#
#   bash benchmarks/gpu/bundle.sh [OUT_DIR]              build into OUT_DIR (default .whl), then the check
#   bash benchmarks/gpu/bundle.sh --check [OUT_DIR]      the check alone: the sizes, and a failure above the limit
#   bash benchmarks/gpu/bundle.sh [--leanrl CHECKOUT] [--before COMMIT] [OUT_DIR]   with what two plans run beside ours
#
# OUT_DIR receives, and keeps nothing else: the wheels pinned below, envpool-atari.tgz (envpool and its assets cut to
# the Atari engine and ROMs, the only envpool tasks the scripts make) and COMMIT (the commit the tree is at, for the
# sitting, which has no git). On the GPU machine benchmarks/gpu/gpu.sh installs them (docs/gpu.md):
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site OUT_DIR/*.whl
#   tar xzf OUT_DIR/envpool-atari.tgz -C /tmp/site; export PYTHONPATH=/tmp/site
# With --leanrl, OUT_DIR/leanrl/: LeanRL's optimized scripts from CHECKOUT (a clean checkout of
# github.com/pytorch-labs/LeanRL, which stays outside this repository), fixed only to run, with the stand-in for wandb
# and FIXES.json (python -m benchmarks.vs_leanrl.fixes), and the torchrl wheel their SAC and TD3 import, which
# benchmarks/gpu/gpu.py's leanrl part installs without its dependencies. With --before, OUT_DIR/before/: leanrl/ and
# leanrl_utils/ as they were at COMMIT (git archive), and COMMIT, for its before part.
# The check adds the bundle to the tree that travels with it (`git archive HEAD`, plus untracked files that git does
# not ignore: they travel too) and fails above LIMIT_MIB: the GPU machine takes 64 MiB in all, and the margin is
# for the tree's growth between a check and a sitting.
set -euo pipefail
LIMIT_MIB=${GPU_TRAVEL_LIMIT_MIB:-56}
TORCHRL=torchrl==0.14.1  # installed without its dependencies: it runs beside tensordict 0.15.3 (docs/vs_leanrl.md)
usage() {
  echo "usage: bash benchmarks/gpu/bundle.sh [--check] [--leanrl CHECKOUT] [--before COMMIT] [OUT_DIR]" >&2
  exit 2
}
check_only=0
leanrl=""
before=""
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do
  case $1 in
    --check) check_only=1; shift ;;
    --leanrl) [ $# -ge 2 ] || usage; leanrl=$(realpath -m "$2"); shift 2 ;;
    --before) [ $# -ge 2 ] || usage; before=$2; shift 2 ;;
    *) usage ;;
  esac
done
[ $# -le 1 ] || usage
if [ "$check_only" = 1 ] && [ -n "$leanrl$before" ]; then usage; fi
if [ -n "$leanrl" ] && [ ! -d "$leanrl/leanrl" ]; then
  echo "gpu_bundle: --leanrl $leanrl: not a LeanRL checkout (no leanrl/ folder)" >&2
  exit 2
fi
out=$(realpath -m "${1:-.whl}")
py=${PYVER:-3.12}
cd "$(dirname "$0")/../.."

# The versions CI installs (.ci/run's fresh venv, November 2026), so that the GPU runs the code CI tested; pip's
# --no-deps installs exactly these. Left out on purpose: mujoco-studio (mujoco 4 asks for it, but `import mujoco`
# never loads it: it is the viewer), the rest of envpool (below), and what the GPU image already has (numpy,
# absl-py, packaging, matplotlib, pillow). typing-extensions and cloudpickle are bundled although the image has them:
# tyro 1.0.17 needs a newer typing-extensions than an image may hold, and CI's versions are the ones tested.
PINS=(tensordict==0.15.3 pyvers==0.2.3 cloudpickle==3.1.3
      gymnasium==1.4.0 farama-notifications==0.0.6
      tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1 typing-extensions==4.16.0
      mujoco==4.0.0 mujoco-core==4.0.0 glfw==2.11.0 pyopengl==3.1.10
      dm-env==1.6 dm-tree==0.1.10 optree==0.20.0)
ENVPOOL=(envpool==1.2.5 envpool-assets==0.3.0)

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

check() {  # the sizes that travel, in MiB; a failure above the limit
  local bundle tree untracked total
  [ -d "$out" ] || { echo "gpu_bundle: no bundle in $out; build it first: bash benchmarks/gpu/bundle.sh $out" >&2; exit 1; }
  bundle=$(find "$out" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
  tree=$(git archive HEAD | wc -c)
  # untracked files that git does not ignore travel too; the bundle's own, if git does not ignore it, counted once
  untracked=$(git ls-files -z --others --exclude-standard | { grep -zv "^$(realpath -m --relative-to=. "$out")/" || true; } |
              xargs -0 -r stat -c %s | awk '{ s += $1 } END { print s + 0 }')
  total=$((bundle + tree + untracked))
  for entry in "$out"/*; do  # a folder (leanrl/, before/) as one line: the sum of its files
    [ -e "$entry" ] || continue
    echo "$(find "$entry" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }') $(basename "$entry")$([ -d "$entry" ] && echo /)"
  done | sort -rn | while read -r size name; do
    printf '  %6s MiB  %s\n' "$(mib "$size")" "$name"; done
  echo "bundle $(mib "$bundle") MiB + tree (git archive HEAD) $(mib "$tree") MiB + untracked $(mib "$untracked") MiB" \
       "= $(mib "$total") MiB (limit $LIMIT_MIB MiB; the GPU machine takes 64)"
  if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "gpu_bundle: $(mib "$total") MiB would travel, over $LIMIT_MIB MiB: cut the bundle or the tree" >&2
    exit 1
  fi
}

if [ "$check_only" = 1 ]; then check; exit 0; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
get() {  # cp312 manylinux x86-64 wheels, exactly these versions; a failure stops the build in one line
  local dest=$1; shift
  if ! python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
      -d "$dest" "$@" >"$tmp/pip.log" 2>&1; then
    echo "gpu_bundle: pip download failed: $(grep -E '^ERROR' "$tmp/pip.log" | head -1 || tail -1 "$tmp/pip.log")" >&2
    exit 1
  fi
}
if [ -n "$before" ] && ! git rev-parse --verify -q "$before^{commit}" >/dev/null; then
  echo "gpu_bundle: --before $before: no such commit here" >&2
  exit 2
fi
get "$tmp/whl" "${PINS[@]}"
get "$tmp/envpool" "${ENVPOOL[@]}"
mkdir "$tmp/site"
for w in "$tmp"/envpool/*.whl; do python3 -m zipfile -e "$w" "$tmp/site"; done
( cd "$tmp/site"
  # envpool's Python layer and its Atari engine (atari_envpool.so links to the C library alone: envpool.libs' GL
  # libraries serve its MuJoCo rendering); its assets' Atari ROMs. The entry point registers Atari alone.
  keep=(__init__.py entry.py registration.py py.typed python atari)
  for f in envpool/*; do [[ " ${keep[*]} " == *" ${f#envpool/} "* ]] || rm -rf "$f"; done
  find envpool_assets -mindepth 1 -maxdepth 1 -type d ! -name atari -exec rm -rf {} +
  rm -rf envpool.libs
  printf '"""Trimmed by benchmarks/gpu/bundle.sh: the Atari engine alone."""\nimport envpool.atari.registration  # noqa: F401\n' \
    > envpool/entry.py
  tar czf envpool-atari.tgz envpool envpool_assets envpool-*.dist-info envpool_assets-*.dist-info )
if [ -n "$leanrl" ]; then
  python3 -m benchmarks.vs_leanrl.fixes "$leanrl" "$tmp/leanrl" || exit 1
  get "$tmp/leanrl" "$TORCHRL"
fi
if [ -n "$before" ]; then
  mkdir "$tmp/before"
  git archive "$before" leanrl leanrl_utils | tar x -C "$tmp/before"
  git rev-parse --short "$before" > "$tmp/before/COMMIT"
fi
mkdir -p "$out"
# one version of each (two stop the whole install there); the folders of the last build's options gone with them
rm -rf "$out"/*.whl "$out"/*.tgz "$out"/COMMIT "$out/leanrl" "$out/before"
mv "$tmp"/whl/*.whl "$tmp/site/envpool-atari.tgz" "$out/"
for folder in leanrl before; do [ ! -d "$tmp/$folder" ] || mv "$tmp/$folder" "$out/"; done
# the commit the sitting runs (the copy of the tree there has no .git): HEAD, marked when tracked files differ from it
if commit=$(git rev-parse --short HEAD 2>/dev/null); then
  git diff --quiet HEAD 2>/dev/null || commit="$commit+changes"
  echo "$commit" > "$out/COMMIT"
fi
check
