#!/usr/bin/env bash
# The speed table of docs/speed.md: per pair, eager / optimized with no flag / --compile / the JAX twin,
# taking turns in rounds (benchmarks/sps.py), each pair's results in docs/speed/<pair>/.
#   bash benchmarks/speed/speed.sh [OUT]      (OUT defaults to docs/speed)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-docs/speed}
python -m benchmarks.sps --rounds 3 --steps 8000 --env-id HalfCheetah-v4 --args="--learning-starts 5000 --measure-after 50" --out "$out/sac" \
  sac_continuous_action sac_continuous_action_torchcompile "sac_continuous_action_torchcompile --compile" sac_continuous_action_jax
python -m benchmarks.sps --rounds 3 --steps 8000 --env-id HalfCheetah-v4 --args="--learning-starts 5000 --measure-after 50" --out "$out/td3" \
  td3_continuous_action td3_continuous_action_torchcompile "td3_continuous_action_torchcompile --compile" td3_continuous_action_jax
python -m benchmarks.sps --rounds 3 --steps 20480 --env-id HalfCheetah-v4 --out "$out/ppo_continuous" \
  ppo_continuous_action ppo_continuous_action_torchcompile "ppo_continuous_action_torchcompile --compile" ppo_continuous_action_jax
python -m benchmarks.sps --rounds 3 --steps 8192 --env-id Breakout-v5 --out "$out/ppo_atari" \
  ppo_atari_envpool ppo_atari_envpool_torchcompile "ppo_atari_envpool_torchcompile --compile" ppo_atari_envpool_jax
python -m benchmarks.sps --rounds 5 --steps 40000 --env-id CartPole-v1 --out "$out/dqn" \
  dqn dqn_torchcompile "dqn_torchcompile --compile" dqn_jax
python -m benchmarks.sps --rounds 3 --steps 12000 --env-id Breakout-v5 --args="--learning-starts 8000 --buffer-size 100000" --out "$out/dqn_atari" \
  dqn_atari_envpool dqn_atari_envpool_torchcompile "dqn_atari_envpool_torchcompile --compile" dqn_atari_envpool_jax
python -m benchmarks.sps --summary "$out"
