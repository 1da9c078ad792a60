#!/usr/bin/env bash
# Settings that need no code, against each optimized script's --compile as it is, one sitting, the
# configurations of a pair taking turns (docs/speed_settings/threads/<pair>/results.md): the OpenMP threads
# sleeping while they wait instead of spinning (OMP_WAIT_POLICY=PASSIVE: leaves the cores to the
# environment's threads), one thread for the small calls (OMP_NUM_THREADS=1), and inductor splitting its
# C++ loops over threads only from larger sizes (TORCHINDUCTOR_CPP_MIN_CHUNK_SIZE, default 512).
# Usage: bash benchmarks/speed_settings/speed_settings.sh [out folder] [pair ...]
#   (default docs/speed_settings/threads and all four pairs: sac td3 ppo_continuous ppo_atari)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-docs/speed_settings/threads}
shift || true
pairs=("$@")
(( ${#pairs[@]} )) || pairs=(sac td3 ppo_continuous ppo_atari)
want() { [[ " ${pairs[*]} " == *" $1 "* ]]; }
settings() {  # the script with --compile, then each setting before it
  echo "$1 --compile"
  for s in OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1 TORCHINDUCTOR_CPP_MIN_CHUNK_SIZE=4096; do echo "$s $1 --compile"; done
}
mapfile -t sac < <(settings sac_continuous_action_torchcompile)
mapfile -t td3 < <(settings td3_continuous_action_torchcompile)
mapfile -t ppo < <(settings ppo_continuous_action_torchcompile)
mapfile -t atari < <(settings ppo_atari_envpool_torchcompile)
want sac && python -m benchmarks.sps --rounds 3 --steps 8000 --env-id HalfCheetah-v4 --args="--learning-starts 5000 --measure-after 50" --out "$out/sac" "${sac[@]}"
want td3 && python -m benchmarks.sps --rounds 3 --steps 8000 --env-id HalfCheetah-v4 --args="--learning-starts 5000 --measure-after 50" --out "$out/td3" "${td3[@]}"
want ppo_continuous && python -m benchmarks.sps --rounds 3 --steps 20480 --env-id HalfCheetah-v4 --out "$out/ppo_continuous" "${ppo[@]}"
want ppo_atari && python -m benchmarks.sps --rounds 3 --steps 8192 --env-id Breakout-v5 --out "$out/ppo_atari" "${atari[@]}"
true
