#!/usr/bin/env bash
# The full comparison: every script pair of leanrl/, the eager script once per seed, the optimized one in
# each mode per seed and the JAX twin (when JAX is installed), one run at a time, then the report.
{  # the whole file is one block: bash reads it all before running, so a run of hours is not
   # thrown off by an edit or a git pull of run.sh meanwhile (bash reads scripts as it goes)
set -uo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python}
die() { echo "run.sh: error: $*" >&2; exit 2; }
# PAIRS and EAGER (pair -> eager script) from leanrl_utils/presets.py, which the report shares
pairs_decl=$("$PYTHON" -m leanrl_utils.presets pairs) || die "cannot run '$PYTHON' (install the requirements first, see README)"
eval "$pairs_decl"
# --quick: a few thousand steps, small env counts; enough for every mode to log its fps
declare -A QUICK=(
  [sac]="--total-timesteps 1500 --learning-starts 1000"
  [td3]="--total-timesteps 1500 --learning-starts 1000"
  [ppo_continuous]="--total-timesteps 2048 --num-steps 512"
  [ppo_atari]="--total-timesteps 512 --num-envs 4 --num-steps 32"
  [dqn]="--total-timesteps 3000 --learning-starts 1000"
  [dqn_atari]="--total-timesteps 1500 --learning-starts 1000 --buffer-size 10000"
)
MODES=(eager none compile cudagraphs compile+cudagraphs jax)

usage() {
  cat <<EOF
usage: bash run.sh [options]

Runs every selected script pair: the eager script once per seed, the optimized one in each mode
(no flag, --compile, --cudagraphs, both) per seed, and the JAX twin (mode jax), one run at a time,
then writes the report (report.md and PNG plots) into the output folder. Without CUDA the
--cudagraphs modes are skipped; without JAX (in the README's install, requirements-all.txt) the JAX
twins are. A rerun skips the runs already complete and goes on with a run stopped short (Ctrl-C, a
kill) from its checkpoint; a failed run is reported and the others go on.

options:
  --scripts LIST   pairs to run, comma- or space-separated (default: all): ${PAIRS[*]}
                   (a script name such as sac_continuous_action_torchcompile selects its pair)
  --seeds LIST     seeds, comma- or space-separated (default: 21 31 41)
  --steps N        --total-timesteps of every run (default: each script's own default)
  --out DIR        output folder (default: results)
  --quick          a few thousand steps per run, small env counts: checks the whole pipeline
  --preset NAME    a preset of leanrl_utils/presets.json: its pairs, tasks, step budgets and modes
                   (cpu: learning curves on a 2-core CPU, eager against --compile and the JAX twin, hours;
                   halfcheetah_1m: PPO on HalfCheetah-v4 at CleanRL's 1M steps, eager against
                   --compile and the JAX twin, over an hour on 2 cores: docs/learning.md)
  --redo           run again the runs already complete
  -h, --help       this help
EOF
}

scripts=() seeds=(21 31 41) steps="" out=results quick=0 redo=0 preset=""
command="bash run.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --scripts) [ $# -ge 2 ] || die "--scripts needs a value"; IFS=', ' read -r -a scripts <<< "$2"; shift 2 ;;
    --seeds) [ $# -ge 2 ] || die "--seeds needs a value"; IFS=', ' read -r -a seeds <<< "$2"; shift 2 ;;
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; steps=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --preset) [ $# -ge 2 ] || die "--preset needs a value"; preset=$2; shift 2 ;;
    --redo) redo=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see bash run.sh --help)" ;;
  esac
done

declare -A PRESET_ARGS=()
if [ -n "$preset" ]; then
  [ $quick = 0 ] || die "--preset and --quick do not go together"
  preset_decl=$("$PYTHON" -m leanrl_utils.presets preset "$preset" 2>&1) || { echo "$preset_decl" >&2; exit 2; }
  eval "$preset_decl"
  MODES=("${PRESET_MODES[@]}")
  [ ${#scripts[@]} -gt 0 ] || scripts=("${PRESET_PAIRS[@]}")
fi
[ ${#scripts[@]} -gt 0 ] || scripts=("${PAIRS[@]}")

pairs=()
for s in "${scripts[@]}"; do
  [ -n "$s" ] || continue
  s=${s%.py}; s=${s#leanrl/}; s=${s%_torchcompile}
  for p in "${PAIRS[@]}"; do [ "${EAGER[$p]}" = "$s" ] && s=$p; done
  [ -n "${EAGER[$s]+x}" ] || die "unknown script '$s'; choose among: ${PAIRS[*]}"
  [ -z "$preset" ] || [ -n "${PRESET_ARGS[$s]+x}" ] || die "the preset '$preset' has no '$s'; it has: ${PRESET_PAIRS[*]}"
  pairs+=("$s")
done
[ ${#pairs[@]} -gt 0 ] || die "--scripts selects nothing"
[ ${#seeds[@]} -gt 0 ] || die "--seeds selects nothing"
for seed in "${seeds[@]}"; do [[ "$seed" =~ ^[0-9]+$ ]] || die "--seeds: '$seed' is not a non-negative integer"; done
[ -z "$steps" ] || [[ "$steps" =~ ^[1-9][0-9]*$ ]] || die "--steps: '$steps' is not a positive integer"

cuda=$("$PYTHON" -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null) \
  || die "cannot import torch with '$PYTHON' (install the requirements first, see README)"
jax=$("$PYTHON" -c "import jax, flax, optax" >/dev/null 2>&1 && echo 1 || echo 0)
# what the report needs at the end, checked before the first run rather than after hours of them
for module in matplotlib tensorboard; do
  "$PYTHON" -c "import $module" >/dev/null 2>&1 \
    || die "cannot import $module, which the report needs (pip install -e \".[test]\", or the README's install)"
done
mkdir -p "$out/logs" || die "cannot create '$out'"
out=$(cd "$out" && pwd)
"$PYTHON" -c "import json, sys; from leanrl_utils.machine import describe_machine; \
json.dump(describe_machine(), open(sys.argv[1], 'w'), indent=1)" "$out/hardware.json"
# a folder filled by several invocations (a rerun resumes, another --scripts adds pairs) records each
grep -qxF -- "$command" "$out/command.txt" 2>/dev/null || echo "$command" >> "$out/command.txt"
if [ -n "$preset" ]; then
  "$PYTHON" -c "import json, sys; from leanrl_utils.presets import load; \
json.dump(load(sys.argv[1]), open(sys.argv[2], 'w'), indent=1)" "$preset" "$out/preset.json"
fi

failed=0 done_runs=0 skipped=0
for pair in "${pairs[@]}"; do
  # seed outermost: the modes of a seed run back to back, so the drift of a shared machine falls
  # on all of them, and a run cut short leaves whole seeds, eager beside optimized
  for seed in "${seeds[@]}"; do
    for mode in "${MODES[@]}"; do
      if [[ $mode == *cudagraphs* && $cuda != 1 ]]; then
        [ "$seed" = "${seeds[0]}" ] && echo "== ${EAGER[$pair]} $mode: skipped (no CUDA device)"
        continue
      fi
      if [[ $mode == jax && $jax != 1 ]]; then
        [ "$seed" = "${seeds[0]}" ] && echo "== ${EAGER[$pair]}_jax: skipped (JAX is not installed:" \
          "pip install -r requirements/requirements-all.txt)"
        continue
      fi
      script=${EAGER[$pair]} flags=()
      case "$mode" in eager) ;; jax) script+=_jax ;; *) script+=_torchcompile ;; esac
      [[ $mode == compile || $mode == compile+cudagraphs ]] && flags+=(--compile)
      [[ $mode == *cudagraphs* ]] && flags+=(--cudagraphs)
      extra=""
      [ $quick = 1 ] && extra=${QUICK[$pair]}
      [ -n "$preset" ] && extra=${PRESET_ARGS[$pair]}
      [ -n "$steps" ] && extra=$(sed -E 's/--total-timesteps [0-9]+ ?//' <<< "$extra")  # --steps wins
      read -r -a extra_args <<< "$extra"
      flags+=("${extra_args[@]}")
      [ -n "$steps" ] && flags+=(--total-timesteps "$steps")
      dir="$out/runs/$script/$mode/seed$seed"
      log="$out/logs/${script}__${mode}__seed$seed.log"
      if [ -f "$dir/done" ] && [ $redo = 0 ]; then
        skipped=$((skipped + 1))
        continue
      fi
      # a run stopped short (Ctrl-C, a kill) goes on from its checkpoint, with its own flags; else it starts over
      saved=$(ls -d "$dir"/runs/*/checkpoint.pt 2>/dev/null | head -n 1)
      if [ -n "$saved" ] && [ $redo = 0 ]; then
        run_args=(--resume "runs/$(basename "$(dirname "$saved")")")
        echo "== $script: going on with ${run_args[1]} from its checkpoint"
      else
        rm -rf "$dir" "$dir.failed" && mkdir -p "$dir" && : > "$log"
        run_args=(--seed "$seed" "${flags[@]}")
        echo "== $script ${flags[*]} --seed $seed"
      fi
      start=$(date +%s)
      (cd "$dir" && "$PYTHON" "$OLDPWD/leanrl/$script.py" "${run_args[@]}") >> "$log" 2>&1
      code=$?
      if [ $code = 0 ]; then
        touch "$dir/done" && rm -f "$dir.failed"
        done_runs=$((done_runs + 1))
        echo "   done in $(( $(date +%s) - start )) s"
      elif [ -n "$saved" ] && [ $code = 2 ] && tail -n 1 "$log" | grep -q "(it ended there)"; then
        touch "$dir/done" && rm -f "$dir.failed"  # stopped after its last checkpoint: it had ended
        done_runs=$((done_runs + 1))
        echo "   done (it had ended before it stopped)"
      else
        printf '%s (mode %s, seed %s) failed with exit code %s; log: %s\n' "$script" "$mode" "$seed" "$code" \
          "$log" > "$dir.failed"
        failed=$((failed + 1))
        echo "   FAILED (exit code $code), see $log; going on" >&2
        [ $code = 130 ] && { echo "run.sh: interrupted" >&2; exit 130; }
      fi
    done
  done
done

echo "== $done_runs runs done, $skipped already complete, $failed failed"
"$PYTHON" -m leanrl_utils.report "$out" || exit 1
[ $failed = 0 ]
exit
}
