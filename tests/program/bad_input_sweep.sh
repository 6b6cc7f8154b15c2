#!/usr/bin/env bash
# The kformer program on a table of wrong calls: missing, empty, truncated and malformed files,
# impossible model shapes and training settings, a checkpoint that does not fit the data, a
# sequence past a learnable encoding's max_len, unwritable outputs, unknown backends. Each must
# exit non-zero with a one-line message ("kformer: error: ..." or the command line's own), create
# nothing, and leave an existing good checkpoint and data byte for byte as they were.
#
#   bad_input_sweep.sh KFORMER_PROGRAM WORK_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" "$@"
data=$work/data
small=(--d-model 16 --heads 2 --layers 1 --dim-feedforward 32 --batch-size 32 --epochs 1
       --no-progress)

# A good checkpoint (learnable encoding: max_len = the data's 96 steps) and files derived from
# the data.
"$kformer" pretrain --data "$data/regression_train.ts" --test "$data/regression_test.ts" \
  "${small[@]}" --pos-encoding learnable --output-dir "$work/good" >/dev/null 2>&1 || exit 1
header() { sed -n '1,/^@data/p' "$data/regression_train.ts"; }
: >"$work/empty.ts"
head -c 5000 "$data/regression_train.ts" >"$work/truncated.ts"
{ header; echo "1,2,x,4:5"; } >"$work/malformed.ts"
# Three series of 120 steps (longer than the checkpoint's max_len of 96), 8 features.
{
  header
  row=$(seq -s, 1 120)
  for _ in 1 2 3; do
    line=""
    for _ in 1 2 3 4 5 6 7 8; do line+="$row:"; done
    echo "${line}2.5"
  done
} >"$work/long.ts"
# Two features instead of eight.
{ header | sed 's/^@dimensions 8/@dimensions 2/'; echo "1,2,3:4,5,6:1.0"; echo "1,2,3:4,5,6:2.0"; } \
  >"$work/two_features.ts"
printf 'id,x\n1,2\n1,oops\n' >"$work/malformed.csv"
mkdir -p "$work/broken"
cp "$work/good/config.json" "$work/broken/"
head -c 2000 "$work/good/model.safetensors" >"$work/broken/model.safetensors"
printf 'not a directory' >"$work/a_file"

snapshot() { (cd "$work" && find good data broken -type f -exec sha256sum {} + | sort); }
before=$(snapshot)

tried=0
failed=0
# expect NAME NEW_PATH_THAT_MUST_NOT_APPEAR -- ARGS...
expect() {
  local name=$1 created=$2
  shift 3
  tried=$((tried + 1))
  local status=0
  "$kformer" "$@" >"$work/stdout" 2>"$work/stderr" || status=$?
  local message
  message=$(grep -v '^\s*$' "$work/stderr" | grep -v 'OMP_PROC_BIND\|OpenMP\|For unit testing')
  local problem=""
  if [ "$status" -eq 0 ]; then
    problem="exit status 0"
  elif [ "$status" -ge 128 ]; then
    problem="killed by signal $((status - 128))"
  elif [ -z "$message" ]; then
    problem="no message on stderr"
  elif [ "$(printf '%s\n' "$message" | grep -c 'error\|Error\|ERROR\|required\|not expected\|not in\|is not\|Could not\|failed')" -eq 0 ]; then
    problem="no error message: $message"
  elif [ "$(printf '%s\n' "$message" | wc -l)" -gt 2 ]; then
    problem="a message of $(printf '%s\n' "$message" | wc -l) lines"
  elif [ "$created" != "-" ] && [ -e "$created" ]; then
    problem="created $created"
  fi
  if [ -n "$problem" ]; then
    failed=$((failed + 1))
    echo "FAIL [$name]: $problem" >&2
    sed 's/^/    /' "$work/stderr" >&2
  else
    echo "ok   [$name] (exit $status): $(printf '%s\n' "$message" | tail -1)"
  fi
}

out=$work/out
expect "data file missing" "$out" -- pretrain --data "$work/nope.ts" "${small[@]}" --output-dir "$out"
expect "data file empty" "$out" -- pretrain --data "$work/empty.ts" "${small[@]}" --output-dir "$out"
expect "data file truncated" "$out" -- pretrain --data "$work/truncated.ts" "${small[@]}" --output-dir "$out"
expect "malformed .ts value" "$out" -- pretrain --data "$work/malformed.ts" "${small[@]}" --output-dir "$out"
expect "malformed CSV" "$out" -- pretrain --data "$work/malformed.csv" --id-column id "${small[@]}" --output-dir "$out"
expect "data is a directory without series" "$out" -- pretrain --data "$work/good" "${small[@]}" --output-dir "$out"
expect "heads do not divide d_model" "$out" -- pretrain --data "$data/regression_train.ts" "${small[@]}" --heads 3 --output-dir "$out"
expect "d_model 0" "$out" -- pretrain --data "$data/regression_train.ts" "${small[@]}" --d-model 0 --output-dir "$out"
expect "no layers" "$out" -- pretrain --data "$data/regression_train.ts" "${small[@]}" --layers 0 --output-dir "$out"
expect "batch size 0" "$out" -- pretrain --data "$data/regression_train.ts" "${small[@]}" --batch-size 0 --output-dir "$out"
expect "negative epochs" "$out" -- pretrain --data "$data/regression_train.ts" "${small[@]}" --epochs -1 --output-dir "$out"
expect "learning rate NaN" "$out" -- pretrain --data "$data/regression_train.ts" "${small[@]}" --lr nan --output-dir "$out"
expect "dropout 1.5" "$out" -- pretrain --data "$data/regression_train.ts" "${small[@]}" --dropout 1.5 --output-dir "$out"
expect "masking ratio 2" "$out" -- pretrain --data "$data/regression_train.ts" "${small[@]}" --masking-ratio 2 --output-dir "$out"
expect "unknown activation" "$out" -- pretrain --data "$data/regression_train.ts" "${small[@]}" --activation swish --output-dir "$out"
expect "output dir is a file" - -- pretrain --data "$data/regression_train.ts" "${small[@]}" --output-dir "$work/a_file/x"
expect "backend not enabled" "$out" -- --backend cuda pretrain --data "$data/regression_train.ts" "${small[@]}" --output-dir "$out"
expect "unknown backend" "$out" -- --backend tpu pretrain --data "$data/regression_train.ts" "${small[@]}" --output-dir "$out"
expect "unknown backend, info" - -- --backend tpu info
expect "negative seed" "$out" -- pretrain --data "$data/regression_train.ts" "${small[@]}" --seed -1 --output-dir "$out"
expect "negative data seed" "$work/generated" -- --demo-seed -1 generate-data --output-dir "$work/generated"
expect "checkpoint missing" - -- evaluate --checkpoint "$work/nope" --data "$data/regression_test.ts"
expect "checkpoint truncated" - -- evaluate --checkpoint "$work/broken" --data "$data/regression_test.ts"
expect "resume from a truncated checkpoint" - -- pretrain --data "$data/regression_train.ts" "${small[@]}" --output-dir "$work/broken" --resume
expect "checkpoint vs data features" - -- evaluate --checkpoint "$work/good" --data "$work/two_features.ts"
expect "sequence past max_len" - -- evaluate --checkpoint "$work/good" --data "$work/long.ts"
expect "embed to an unwritable path" - -- embed --checkpoint "$work/good" --data "$data/regression_test.ts" --output "$work/a_file/z.csv"
expect "predict with malformed masks" "$work/p.csv" -- predict --checkpoint "$work/good" --data "$data/regression_test.ts" --masks "$work/malformed.csv" --output "$work/p.csv"
expect "finetune data the pretrained model does not fit" "$out" -- finetune --data "$work/two_features.ts" "${small[@]}" --pretrained "$work/good" --output-dir "$out"
# Outputs that would destroy the command's own inputs or an earlier checkpoint.
expect "predict over its --data" - -- predict --checkpoint "$work/good" --data "$data/regression_test.ts" --output "$data/regression_test.ts"
expect "predict over the checkpoint's weights" - -- predict --checkpoint "$work/good" --data "$data/regression_test.ts" --output "$work/good/model.safetensors"
expect "embed over the checkpoint's config" - -- embed --checkpoint "$work/good" --data "$data/regression_test.ts" --output "$work/good/./config.json"
expect "finetune over its pretrained model" - -- finetune --data "$data/classification_train.ts" "${small[@]}" --pretrained "$work/good" --change-output --output-dir "$work/good/"
expect "pretrain over a checkpoint" - -- pretrain --data "$data/regression_train.ts" "${small[@]}" --output-dir "$work/good"
expect "--resume and --overwrite" - -- pretrain --data "$data/regression_train.ts" "${small[@]}" --output-dir "$work/good" --resume --overwrite
expect "encode dim 0" - -- encode --dim 0 --len 10
expect "unknown option" - -- pretrain --data "$data/regression_train.ts" --no-such-option

after=$(snapshot)
if [ "$before" != "$after" ]; then
  echo "FAIL: an existing checkpoint or data file changed:" >&2
  diff <(echo "$before") <(echo "$after") >&2
  failed=$((failed + 1))
fi
# --overwrite is the explicit way to replace a checkpoint.
cp -r "$work/good" "$work/again"
old=$(sha256sum <"$work/again/model.safetensors")
if ! "$kformer" pretrain --data "$data/regression_train.ts" "${small[@]}" --seed 7 \
     --output-dir "$work/again" --overwrite >"$work/stdout" 2>"$work/stderr"; then
  echo "FAIL [--overwrite]: refused:" >&2; sed 's/^/    /' "$work/stderr" >&2; failed=$((failed + 1))
elif [ "$old" = "$(sha256sum <"$work/again/model.safetensors")" ]; then
  echo "FAIL [--overwrite]: the checkpoint was not replaced" >&2; failed=$((failed + 1))
else
  echo "ok   [--overwrite replaces a checkpoint]"
fi
echo "$tried bad calls tried, $failed failed"
[ "$failed" -eq 0 ]
