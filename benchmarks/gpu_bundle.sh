#!/usr/bin/env bash
# Build an offline bundle of the project's Python dependencies for an x86-64
# Linux GPU machine that already has Python 3.12, torch, numpy, tensorboard,
# tqdm and rich, but cannot reach a package index.
#
#   bash benchmarks/gpu_bundle.sh [OUT_DIR]      (default: .whl, which git ignores only if you list it)
#
# OUT_DIR receives pure wheels plus envpool-atari.tgz: envpool trimmed to its
# Atari and classic-control engines (the full envpool with its assets is
# ~600 MB; the trimmed tree is ~11 MB). On the GPU machine:
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site OUT_DIR/*.whl
#   tar xzf OUT_DIR/envpool-atari.tgz -C /tmp/site
#   export PYTHONPATH=/tmp/site
set -euo pipefail
out=${1:-.whl}
py=${PYVER:-3.12}
mkdir -p "$out"
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
get() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" \
          --implementation cp "${plat[@]}" -d "$1" "${@:2}" 2>&1 | grep -v '^WARNING' || true; }
# Pure-Python and small binary wheels the scripts need beyond torch.
get "$out" tensordict==0.15.3 pyvers cloudpickle imageio gymnasium farama-notifications tyro docstring-parser typeguard \
    mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 glfw pyopengl \
    dm-env dm-tree optree types-protobuf absl-py
# envpool, trimmed: keep the Atari and classic-control engines and the Atari ROMs.
tmp=$(mktemp -d)
get "$tmp/whl" envpool envpool-assets
mkdir -p "$tmp/site"
for w in "$tmp"/whl/envpool-*.whl "$tmp"/whl/envpool_assets-*.whl; do
  python3 -m zipfile -e "$w" "$tmp/site"
done
( cd "$tmp/site"
  find envpool -name '*.so' -size +1M | grep -v -e /atari/ -e /classic_control/ | xargs rm -f
  find envpool_assets -mindepth 1 -maxdepth 1 -type d ! -name atari -exec rm -rf {} +
  printf '"""Trimmed: Atari and classic control only."""\nimport envpool.atari.registration  # noqa: F401\nimport envpool.classic_control.registration  # noqa: F401\n' > envpool/entry.py
  tar czf envpool-atari.tgz envpool envpool.libs envpool_assets envpool-*.dist-info 2>/dev/null || \
  tar czf envpool-atari.tgz envpool envpool_assets envpool-*.dist-info )
mv "$tmp/site/envpool-atari.tgz" "$out/"
rm -rf "$tmp"
ls -la "$out"
du -sh "$out"
