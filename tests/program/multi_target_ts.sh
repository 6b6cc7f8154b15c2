#!/usr/bin/env bash
# Regression with several targets per series from .ts files (','-separated after the last ':', a
# kformer extension): fine-tuning learns both, evaluate reads them back, predict writes one column
# per target, and a file whose lines disagree on the count is refused naming the line.
#
#   multi_target_ts.sh KFORMER_PROGRAM WORK_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" "$@"
fail() { echo "FAIL: $*" >&2; exit 1; }
# The generated regression data's target t becomes the two targets t and 1 - t.
for split in train test; do
  awk 'BEGIN { data = 0 } /^@data/ { print; data = 1; next }
       data && NF { n = split($0, f, ":"); t = f[n]; sub(/:[^:]*$/, ""); print $0 ":" t "," 1 - t; next }
       { print }' "$work/data/regression_$split.ts" >"$work/two_$split.ts"
done
grep -q ',' <(tail -n1 "$work/two_train.ts" | awk -F: '{ print $NF }') || fail "the test data have no second target"

"$kformer" --backend "$first_host_backend" --no-progress finetune \
  --data "$work/two_train.ts" --test "$work/two_test.ts" --d-model 16 --heads 2 --layers 1 \
  --dim-feedforward 32 --epochs 2 --output-dir "$work/model" >"$work/finetune.log" 2>&1 ||
  { cat "$work/finetune.log" >&2; fail "fine-tuning on two targets failed"; }
"$kformer" --backend "$first_host_backend" evaluate --checkpoint "$work/model" \
  --data "$work/two_test.ts" >"$work/evaluate.log" 2>&1 ||
  { cat "$work/evaluate.log" >&2; fail "evaluate on two targets failed"; }
"$kformer" --backend "$first_host_backend" predict --checkpoint "$work/model" \
  --data "$work/two_test.ts" --output "$work/predictions.csv" >"$work/predict.log" 2>&1 ||
  { cat "$work/predict.log" >&2; fail "predict on two targets failed"; }
series=$(grep -c ':' <(sed -n '/^@data/,$p' "$work/two_test.ts" | tail -n +2))
rows=$(($(wc -l <"$work/predictions.csv") - 1))
[ "$rows" = "$series" ] || fail "predict wrote $rows rows for $series series"
columns=$(head -n1 "$work/predictions.csv" | tr ',' '\n' | grep -c 'output\|target\|prediction' || true)
[ "$columns" -ge 2 ] || fail "predict's header has no column per target: $(head -n1 "$work/predictions.csv")"

# One line with one target where the first had two.
awk 'data == 1 && NF { sub(/,[^:,]*$/, ""); data = 2 } /^@data/ { data = 1 } { print }' \
  "$work/two_test.ts" >"$work/uneven.ts"
status=0
"$kformer" --backend "$first_host_backend" evaluate --checkpoint "$work/model" \
  --data "$work/uneven.ts" >"$work/uneven.log" 2>&1 || status=$?
[ "$status" -ne 0 ] && grep -q "target.* (as on line [0-9]*), found" "$work/uneven.log" ||
  { cat "$work/uneven.log" >&2; fail "a line with one target of two was not refused"; }
echo "two targets: fine-tuned, evaluated, $rows predictions with $columns target columns; uneven lines refused"
