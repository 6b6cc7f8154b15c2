#!/usr/bin/env bash
# The kformer program on a table of wrong calls: missing, empty, truncated, malformed and
# non-regular files (FIFOs, devices, directories), impossible model shapes and training settings,
# options out of their range for every training command, degenerate runs (nothing to mask, an
# empty validation split, data entirely missing), corrupt and foreign checkpoints (integer or
# overflowing weights, negative variances and epochs, an unknown format, a config the weights do
# not have), a checkpoint that does not fit the data, a sequence past a learnable encoding's
# max_len, unwritable outputs, unknown backends and Kokkos options. Each must exit non-zero within
# 120 s with a one-line message ("kformer: error: ..." or the command line's own), create nothing,
# and leave every existing checkpoint and data file byte for byte as it was. The counts by outcome
# are printed at the end.
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

# More files that are not data: a FIFO, a directory named like a file, binary and UTF-16 text,
# headers without series, every value missing, repeated or ragged declarations, an unknown label,
# an unknown extension; a directory of CSVs without its labels file; unlabelled series.
mkfifo "$work/fifo.ts" "$work/fifo.csv"
mkdir -p "$work/dir.ts" "$work/csv_dir" "$work/fifo_checkpoint"
mkfifo "$work/fifo_checkpoint/model.safetensors"
printf 't,x\n1,2\n' >"$work/csv_dir/a.csv"
head -c 4096 /dev/urandom >"$work/binary.ts"
printf '@problemName x\n@data\n1,2:3\n' | iconv -f utf-8 -t utf-16 >"$work/utf16.ts"
header | grep -v '^@data' >"$work/no_data.ts"
header >"$work/only_header.ts"
{ header; for _ in 1 2 3; do echo "?,?,?:?,?,?:?,?,?:?,?,?:?,?,?:?,?,?:?,?,?:?,?,?:1.0"; done; } >"$work/all_missing.ts"
{ echo "@problemName a"; header; echo "1,2:1.0"; } >"$work/dup_name.ts"
{ header; echo "1,2,3:4,5:6,7,8:1,2,3:1,2,3:1,2,3:1,2,3:1,2,3:1.0"; } >"$work/ragged.ts"
sed -n '1,/^@data/p' "$data/classification_train.ts" >"$work/bad_label.ts"
echo "1,2:1,2:1,2:1,2:1,2:1,2:1,2:1,2:no_such_class" >>"$work/bad_label.ts"
cp "$data/regression_train.ts" "$work/wrong_ext.txt"
sed '/^@targetLabel/d; /^@classLabel/d' "$data/classification_test.ts" |
  sed '/^@data/,$ s/:[^:]*$//' | sed 's/^@data/@classLabel false\n@data/' >"$work/unlabelled.ts"
"$kformer" finetune --data "$data/classification_train.ts" --test "$data/classification_test.ts" \
  "${small[@]}" --output-dir "$work/classifier" >/dev/null 2>&1 || exit 1
for kind in format-version negative-epoch int-weights negative-variance huge-weights nan-weights \
            huge-d-model extra-layers zero-std negative-count; do
  python3 "$(dirname "${BASH_SOURCE[0]}")/corrupt_checkpoint.py" "$work/good" "$work/corrupt_$kind" "$kind" || exit 1
done

snapshot() {
  (cd "$work" && find good data broken classifier corrupt_* -type f -exec sha256sum {} + | sort)
}
before=$(snapshot)

tried=0
failed=0
declare -A by_status  # exit status -> cases
# expect NAME NEW_PATH_THAT_MUST_NOT_APPEAR -- ARGS...
expect() {
  local name=$1 created=$2
  shift 3
  tried=$((tried + 1))
  local status=0
  timeout 120 "$kformer" "$@" >"$work/stdout" 2>"$work/stderr" </dev/null || status=$?
  by_status[$status]=$((${by_status[$status]:-0} + 1))
  local message
  message=$(grep -v '^\s*$' "$work/stderr" | grep -v 'OMP_PROC_BIND\|OpenMP\|For unit testing')
  local problem=""
  if [ "$status" -eq 0 ]; then
    problem="exit status 0"
  elif [ "$status" -eq 124 ]; then
    problem="still running after 120 s (a hang)"
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
  # A failed case's output must not make the next ones fail too.
  [ "$created" != "-" ] && rm -rf "$created"
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

# --- options out of their range, for each training command ------------------------------------
train="$data/regression_train.ts"
cls="$data/classification_train.ts"
for command in pretrain finetune; do
  d=$train
  [ "$command" = finetune ] && d=$cls
  for bad in "--clip-norm -1" "--clip-norm nan" "--l2-reg -0.5" "--l2-reg inf" \
             "--lr -1" "--lr inf" "--dropout -0.1" "--dropout 1" "--batch-size -5" \
             "--epochs banana" "--epochs 1.5" "--heads 0" "--layers -1" "--dim-feedforward 0" \
             "--d-model -16" "--norm foo" "--pos-encoding foo" "--projection foo" \
             "--conv-kernel 0" "--optimizer sgd" "--weight-decay -1" "--lr-factor 0" \
             "--lr-factor -2" "--lr-step -1" "--seed 99999999999999999999999" "--seed 1e5" \
             "--val-ratio 0" "--val-ratio 1" "--val-ratio 0.0001" "--val-ratio -0.2" \
             "--key-metric f1" "--patience -1" "--activation tanh" "--missing-values mean"; do
    # shellcheck disable=SC2086
    expect "$command $bad" "$out" -- $command --data "$d" "${small[@]}" $bad --output-dir "$out"
  done
done
for bad in "--masking-ratio 0" "--masking-ratio 1" "--masking-ratio -0.1" "--mean-mask-length 0" \
           "--mask-mode foo" "--mask-distribution uniform" "--exclude-features 0 1 2 3 4 5 6 7" \
           "--exclude-features 9" "--exclude-features -1" "--forecast -3" "--forecast 96" \
           "--forecast 1000" "--key-metric accuracy"; do
  # shellcheck disable=SC2086
  expect "pretrain $bad" "$out" -- pretrain --data "$train" "${small[@]}" $bad --output-dir "$out"
done
# Architecture options next to --pretrained, which decides the architecture.
for bad in "--d-model 32" "--heads 4" "--layers 2" "--dim-feedforward 64" "--norm layernorm" \
           "--pos-encoding learnable"; do
  # shellcheck disable=SC2086
  expect "finetune --pretrained with $bad" "$out" -- finetune --data "$cls" --batch-size 32 \
    --epochs 1 --no-progress --pretrained "$work/good" --change-output $bad --output-dir "$out"
done
expect "finetune: pretrained checkpoint missing" "$out" -- finetune --data "$cls" "${small[@]}" --pretrained "$work/nope" --output-dir "$out"
expect "finetune: pretrained is a file" "$out" -- finetune --data "$cls" "${small[@]}" --pretrained "$work/a_file" --output-dir "$out"
expect "finetune: unlabelled data" "$out" -- finetune --data "$work/unlabelled.ts" "${small[@]}" --output-dir "$out"
expect "evaluate: unlabelled data" - -- evaluate --checkpoint "$work/classifier" --data "$work/unlabelled.ts"

# --- data files that are not data --------------------------------------------------------------
for f in fifo.ts dir.ts binary.ts utf16.ts no_data.ts only_header.ts all_missing.ts dup_name.ts \
         ragged.ts bad_label.ts wrong_ext.txt; do
  expect "data $f" "$out" -- pretrain --data "$work/$f" "${small[@]}" --output-dir "$out"
done
expect "data /dev/zero" "$out" -- pretrain --data /dev/zero "${small[@]}" --output-dir "$out"
expect "predict on a FIFO" "$work/p.csv" -- predict --checkpoint "$work/good" --data "$work/fifo.ts" --output "$work/p.csv"
expect "evaluate on all-missing data" - -- evaluate --checkpoint "$work/good" --data "$work/all_missing.ts"
expect "predict masks from a FIFO" "$work/p.csv" -- predict --checkpoint "$work/good" --data "$data/regression_test.ts" --masks "$work/fifo.csv" --output "$work/p.csv"
expect "CSV without the id column" "$out" -- pretrain --data "$work/malformed.csv" "${small[@]}" --output-dir "$out"
expect "directory of CSVs without labels" "$out" -- finetune --data "$work/csv_dir" "${small[@]}" --output-dir "$out"

# --- corrupt and foreign checkpoints -----------------------------------------------------------
for kind in format-version negative-epoch int-weights negative-variance huge-weights nan-weights \
            huge-d-model extra-layers zero-std negative-count; do
  expect "checkpoint $kind: evaluate" - -- evaluate --checkpoint "$work/corrupt_$kind" --data "$data/regression_test.ts"
  expect "checkpoint $kind: predict" "$work/p.csv" -- predict --checkpoint "$work/corrupt_$kind" --data "$data/regression_test.ts" --output "$work/p.csv"
done
expect "resume from a negative epoch" - -- pretrain --data "$train" "${small[@]}" --output-dir "$work/corrupt_negative-epoch" --resume
expect "checkpoint is a FIFO" - -- evaluate --checkpoint "$work/fifo_checkpoint" --data "$data/regression_test.ts"
expect "checkpoint directory is a file" - -- evaluate --checkpoint "$work/a_file" --data "$data/regression_test.ts"
for cmd in evaluate predict embed; do
  expect "$cmd --batch-size 0" - -- $cmd --checkpoint "$work/good" --data "$data/regression_test.ts" --batch-size 0
  expect "$cmd --batch-size -3" - -- $cmd --checkpoint "$work/good" --data "$data/regression_test.ts" --batch-size -3
  expect "$cmd data with other features" - -- $cmd --checkpoint "$work/good" --data "$work/two_features.ts"
done
expect "predict into a directory" - -- predict --checkpoint "$work/good" --data "$data/regression_test.ts" --output "$work/good"
expect "embed into a missing directory" - -- embed --checkpoint "$work/good" --data "$data/regression_test.ts" --output "$work/nope/z.csv"
expect "predict --masks on a classifier" "$work/p.csv" -- predict --checkpoint "$work/classifier" --data "$data/classification_test.ts" --masks "$work/malformed.csv" --output "$work/p.csv"

# --- encode, generate-data, info, global options ----------------------------------------------
for bad in "--dim 0" "--dim -4" "--dim banana" "--len 0" "--len -1" "--len 99999999999" "--base 0" \
           "--base -3" "--base nan" "--first-position nan"; do
  # shellcheck disable=SC2086
  expect "encode $bad" - -- encode $bad
done
expect "encode --csv into a missing directory" - -- encode --dim 8 --len 8 --csv "$work/nope/pe.csv"
expect "encode --png into a file's path" - -- encode --dim 8 --len 8 --png "$work/a_file/pe.png"
expect "encode --csv over a directory" - -- encode --dim 8 --len 8 --csv "$work/good"
expect "generate-data into a file's path" - -- generate-data --output-dir "$work/a_file/d"
for bad in "--kokkos-threads=-5" "--kokkos-threads=abc" "--kokkos-threads" "--kokkos-foo=3" \
           "--kokkos-numa=0" "--kokkos-device-id=-1" "--kokkos-disable-warnings=yes"; do
  expect "info $bad" - -- info "$bad"
done
expect "precision half" - -- --precision half info
expect "unknown command" - -- train --data "$train"
expect "no data given" "$out" -- pretrain "${small[@]}" --output-dir "$out"
expect "backend empty" - -- --backend "" info

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
outcomes=""
for status in $(printf '%s\n' "${!by_status[@]}" | sort -n); do
  case "$status" in
    0) what="succeeded" ;;
    2) what="kformer's error" ;;
    124) what="hung" ;;
    1[0-9][0-9]) what="the command line's error" ;;
    *) what="other" ;;
  esac
  outcomes+="${outcomes:+, }exit $status ($what): ${by_status[$status]}"
done
echo "$tried bad calls tried, $failed failed; by outcome: $outcomes"
[ "$failed" -eq 0 ]
