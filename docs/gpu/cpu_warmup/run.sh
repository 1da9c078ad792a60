#!/bin/bash
# cold-cache warm-up of the headline's compiled runs and JAX twins, on this CPU, 2 rounds interleaved
. /work/main/.venv/bin/activate
export PYTHONPATH=/work/wt51
cd /work/wt51
cold="TORCHINDUCTOR_FX_GRAPH_CACHE=0 TORCHINDUCTOR_AUTOGRAD_CACHE=0"
log=/tmp/i51/warm/load.txt
: > $log
( while true; do echo "$(date +%T) $(cut -d' ' -f1-3 /proc/loadavg)" >> $log; sleep 10; done ) &
mon=$!
python -m benchmarks.sps --rounds 2 --steps 1300 --env-id HalfCheetah-v4 --args="--learning-starts 1000 --measure-after 50" \
  "$cold sac_continuous_action_torchcompile --compile --cudagraphs" sac_continuous_action_jax --out /tmp/i51/warm/sac
python -m benchmarks.sps --rounds 2 --steps 1300 --env-id HalfCheetah-v4 --args="--learning-starts 1000 --measure-after 50" \
  "$cold td3_continuous_action_torchcompile --compile --cudagraphs" td3_continuous_action_jax --out /tmp/i51/warm/td3
python -m benchmarks.sps --rounds 2 --steps 6144 --env-id HalfCheetah-v4 \
  "$cold ppo_continuous_action_torchcompile --compile --cudagraphs" ppo_continuous_action_jax --out /tmp/i51/warm/ppo_continuous
python -m benchmarks.sps --rounds 2 --steps 3072 --env-id Breakout-v5 \
  "$cold ppo_atari_envpool_torchcompile --compile --cudagraphs" ppo_atari_envpool_jax --out /tmp/i51/warm/ppo_atari
kill $mon
echo done > /tmp/i51/warm/done
