#!/usr/bin/env bash
# kformer finetune and pretrain under mpirun with 2 ranks on this machine: the same training as one
# process on the same global batches (batch 16 a rank against 32), within float reassociation, with
# LayerNorm and with synchronised BatchNorm; rank 0 alone writes; a killed 2-rank run resumes to
# the bits of an uninterrupted one; ranks that disagree on the data, a shard left empty and
# commands other than training are refused on every rank, without a hang.
#
#   mpi.sh KFORMER_PROGRAM WORK_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" "$@"
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "mpirun not found: not applicable"; exit 77; }
! "$kformer" info 2>/dev/null | grep -q "MPI: off" || { echo "kformer built without MPI: not applicable"; exit 77; }
export OMP_NUM_THREADS=1 OMP_PROC_BIND=false KFORMER_MPI_TIMEOUT=120
mpirun=(timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2 -x OMP_NUM_THREADS
        -x OMP_PROC_BIND -x KFORMER_MPI_TIMEOUT)
cls=(--data "$work/data/classification_train.ts" --test "$work/data/classification_test.ts")
model=(--d-model 16 --heads 2 --layers 1 --dim-feedforward 32 --dropout 0 --seed 5)
finetune=(--backend "$first_host_backend" --no-progress finetune "${cls[@]}" "${model[@]}" --epochs 3)

# logits_close A B TOLERANCE: the logit columns of two predict outputs within TOLERANCE (relative
# to the largest logit in A). The predicted class is not compared: float32 reassociation can flip
# a near tie (1 and 2 threads of one process differ by up to 2e-3 on these logits with BatchNorm).
logits_close() {
  paste -d' ' <(cut -d, -f3- "$1" | tr ',' '\n') <(cut -d, -f3- "$2" | tr ',' '\n') | awk -v tol="$3" '
    $1 ~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/ { d = $1 - $2; if (d < 0) d = -d; if (d > worst) worst = d
      a = $1 < 0 ? -$1 : $1; if (a > scale) scale = a; next }
    $1 != $2 { bad = 1 }
    END { if (bad || worst > tol * (scale > 1 ? scale : 1)) { print "largest difference " worst; exit 1 } }'
}

for variant in "--norm layernorm" "--norm batchnorm --sync-batchnorm"; do
  name=$(echo "$variant" | tr -cd 'a-z')
  # shellcheck disable=SC2086
  "$kformer" "${finetune[@]}" $variant --batch-size 32 --output-dir "$work/one_$name" \
    >"$work/one_$name.log" 2>&1 || { cat "$work/one_$name.log" >&2; fail "1 rank ($variant) failed"; }
  # shellcheck disable=SC2086
  "${mpirun[@]}" "$kformer" "${finetune[@]}" $variant --batch-size 16 --output-dir "$work/two_$name" \
    >"$work/two_$name.log" 2>&1 || { cat "$work/two_$name.log" >&2; fail "2 ranks ($variant) failed"; }
  for run in one two; do
    "$kformer" --backend "$first_host_backend" predict --checkpoint "$work/${run}_$name" \
      --data "$work/data/classification_test.ts" --output "$work/${run}_$name.csv" >/dev/null 2>&1 ||
      fail "predict with the $run-rank model ($variant) failed"
  done
  logits_close "$work/one_$name.csv" "$work/two_$name.csv" 1e-3 ||
    fail "2 ranks ($variant) predict other logits than 1 rank on the same global batches"
  [ "$(grep -c '^finetune epoch' "$work/two_$name.log")" = 3 ] ||
    fail "the 2-rank run's output does not list its 3 epochs once (rank 0 alone prints)"
done
echo "ok   2 ranks x 16 series = 1 rank x 32 within 1e-3 (LayerNorm; synchronised BatchNorm)"

# A 2-rank run killed after its second epoch resumes to the uninterrupted run's bits.
pretrain=(--backend "$first_host_backend" --no-progress pretrain --data "$work/data/regression_train.ts"
          --test "$work/data/regression_test.ts" "${model[@]}" --batch-size 16)
"${mpirun[@]}" "$kformer" "${pretrain[@]}" --epochs 6 --output-dir "$work/whole" >"$work/whole.log" 2>&1 ||
  { cat "$work/whole.log" >&2; fail "the uninterrupted 2-rank pretraining failed"; }
"${mpirun[@]}" "$kformer" "${pretrain[@]}" --epochs 6 --output-dir "$work/killed" >"$work/killed.log" 2>&1 &
job=$!
for _ in $(seq 2400); do
  [ -f "$work/killed/metrics.jsonl" ] && [ "$(wc -l <"$work/killed/metrics.jsonl")" -ge 2 ] && break
  sleep 0.025
done
pkill -KILL -P "$job" mpirun 2>/dev/null
pkill -KILL -f "output-dir $work/killed" 2>/dev/null
wait "$job" 2>/dev/null
"${mpirun[@]}" "$kformer" "${pretrain[@]}" --epochs 6 --output-dir "$work/killed" --resume >"$work/resumed.log" 2>&1 ||
  { cat "$work/resumed.log" >&2; fail "the killed 2-rank run did not resume"; }
grep -q "^resuming" "$work/resumed.log" || fail "the resumed run did not say where it resumed"
cmp -s "$work/whole/model.safetensors" "$work/killed/model.safetensors" ||
  fail "killed and resumed under 2 ranks, the final checkpoint differs from the uninterrupted run's"
echo "ok   a killed 2-rank run resumes to the uninterrupted run's checkpoint, bit for bit"

# A rank killed mid-run: the job ends (no hang) with a message naming the dead rank, and what the
# output directory holds is a whole checkpoint or none.
"${mpirun[@]}" "$kformer" "${pretrain[@]}" --epochs 40 --output-dir "$work/dying" >"$work/dying.log" 2>&1 &
job=$!
for _ in $(seq 2400); do
  [ -f "$work/dying/metrics.jsonl" ] || ! kill -0 "$job" 2>/dev/null && break
  sleep 0.025
done
start=$SECONDS
pkill -KILL -n -f "output-dir $work/dying" || fail "no rank of the dying run to kill"
status=0
wait "$job" || status=$?
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || { cat "$work/dying.log" >&2; fail "a killed rank: exit $status"; }
grep -qi "signal 9\|killed\|exited" "$work/dying.log" || { cat "$work/dying.log" >&2; fail "a killed rank is not named"; }
"$kformer" --backend "$first_host_backend" evaluate --checkpoint "$work/dying" \
  --data "$work/data/regression_test.ts" >/dev/null 2>&1 ||
  fail "after a rank died, the checkpoint in the output directory does not load"
echo "ok   a rank killed mid-run ends the job in $((SECONDS - start))s; the checkpoint left loads"

# expect_refusal NAME PATTERN -- MPIRUN_ARGS...: non-zero, in time, PATTERN on stderr.
expect_refusal() {
  local name=$1 pattern=$2 status=0
  shift 3
  timeout 300 mpirun --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS -x KFORMER_MPI_TIMEOUT \
    "$@" >"$work/refused.log" 2>&1 || status=$?
  # every rank says why (the messages of both ranks)
  [ "$status" -ne 0 ] && [ "$status" -ne 124 ] && [ "$(grep -c "$pattern" "$work/refused.log")" -ge 2 ] ||
    { cat "$work/refused.log" >&2; fail "$name: not refused as expected (exit $status)"; }
  echo "ok   $name: refused ($(grep -m1 "$pattern" "$work/refused.log" | cut -c1-110))"
}
awk 'done_header { exit } { print } /^@data/ { done_header = 1 }' "$work/data/classification_train.ts" >"$work/one_series.ts"
sed -n '/^@data/,$p' "$work/data/classification_train.ts" | sed -n 2p >>"$work/one_series.ts"
sed 's/^@dimensions 8/@dimensions 2/' "$work/data/classification_test.ts" |
  awk 'data { n = split($0, f, ":"); print f[1] ":" f[2] ":" f[n]; next } /^@data/ { data = 1 } { print }' \
  >"$work/two_features.ts"
expect_refusal "ranks reading different data" "the ranks disagree on the feature count" -- \
  -np 1 "$kformer" "${finetune[@]}" --batch-size 16 --output-dir "$work/mixed" : \
  -np 1 "$kformer" --backend "$first_host_backend" --no-progress finetune \
  --data "$work/two_features.ts" --test "$work/two_features.ts" "${model[@]}" \
  --epochs 3 --batch-size 16 --output-dir "$work/mixed"
expect_refusal "an empty shard" "1 series for 2 ranks" -- -np 2 "$kformer" \
  --backend "$first_host_backend" --no-progress finetune --data "$work/one_series.ts" \
  --test "$work/data/classification_test.ts" "${model[@]}" --epochs 1 --output-dir "$work/lonely"
expect_refusal "evaluate under 2 ranks" "only pretrain and finetune run" -- -np 2 "$kformer" \
  evaluate --checkpoint "$work/one_layernorm" --data "$work/data/classification_test.ts"
