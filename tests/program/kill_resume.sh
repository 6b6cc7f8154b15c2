#!/usr/bin/env bash
# A training run killed with SIGKILL in the middle of an epoch resumes from its last complete
# checkpoint and ends with the same weights, optimizer state and progress, bit for bit, as a run
# that was never interrupted.
#
#   kill_resume.sh KFORMER_PROGRAM WORK_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" "$@"
epochs=12
args=(--backend "$first_host_backend" --no-progress pretrain --data "$work/data/regression_train.ts"
      --test "$work/data/regression_test.ts" --epochs "$epochs" --d-model 16 --heads 2 --layers 1
      --dim-feedforward 32 --batch-size 32 --seed 11)

"$kformer" "${args[@]}" --output-dir "$work/whole" >"$work/whole.log" 2>&1

"$kformer" "${args[@]}" --output-dir "$work/killed" >"$work/killed.log" 2>&1 &
pid=$!
# Two epochs are logged (their checkpoints are written around then), so the kill lands in the
# third epoch or while its predecessor's checkpoint is being written.
for _ in $(seq 2400); do
  if [ -f "$work/killed/metrics.jsonl" ] && [ "$(wc -l <"$work/killed/metrics.jsonl")" -ge 2 ]; then
    break
  fi
  sleep 0.025
done
kill -KILL "$pid"
status=0
wait "$pid" || status=$?
if [ "$status" -ne 137 ]; then
  echo "FAIL: the run was not killed (exit status $status); it must still be training" >&2
  cat "$work/killed.log" >&2
  exit 1
fi

"$kformer" "${args[@]}" --output-dir "$work/killed" --resume >"$work/resumed.log" 2>&1
resumed_at=$(sed -n 's/^resuming .* at epoch \([0-9]*\)$/\1/p' "$work/resumed.log")
if [ -z "$resumed_at" ] || [ "$resumed_at" -gt "$epochs" ]; then
  echo "FAIL: the resumed run did not resume from a checkpoint" >&2
  cat "$work/resumed.log" >&2
  exit 1
fi
if ! cmp "$work/whole/model.safetensors" "$work/killed/model.safetensors"; then
  echo "FAIL: killed at epoch $resumed_at and resumed, the final checkpoint differs from the" \
    "uninterrupted run's" >&2
  exit 1
fi
# The metrics keep the epochs before the resume: the same epochs as the uninterrupted run's.
epochs_of() { cut -d, -f1,2 "$1/metrics.csv"; }
if [ "$(epochs_of "$work/whole")" != "$(epochs_of "$work/killed")" ]; then
  echo "FAIL: after the resume metrics.csv lists other epochs than the uninterrupted run's:" >&2
  diff <(epochs_of "$work/whole") <(epochs_of "$work/killed") >&2
  exit 1
fi
echo "killed during epoch $resumed_at of $epochs, resumed: final checkpoint identical," \
  "metrics of all $epochs epochs kept"
