#!/usr/bin/env bash
# kformer spectra: generated spectra written as MSP and MGF, read back, trained with and without
# the encodings and scored against the baselines; each variant's checkpoint evaluated (the same
# metrics as the table), run for predictions and representations; a learnable encoding; the
# user's own files (the generated ones) run through --train/--test; bad input (a malformed
# spectrum in the middle of a file, an unknown extension, spectra without fingerprints, an output
# over an input, a second run over the first's checkpoints) is refused naming the file, line and
# spectrum, and nothing is written.
#
#   spectra.sh KFORMER_PROGRAM WORK_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" "$@"
fail() { echo "FAIL: $*" >&2; exit 1; }
small=(--backend "$first_host_backend" spectra --spectra 120 --epochs 2 --d-model 16 --heads 2
       --layers 1 --dim-feedforward 32)

"$kformer" "${small[@]}" --variant full --variant neither --output-dir "$work/gen" >"$work/gen.log" 2>&1 ||
  { cat "$work/gen.log" >&2; fail "the generated run failed"; }
for row in "full " "neither " "baseline (majority)"; do
  grep -q "^$row" "$work/gen.log" || { cat "$work/gen.log" >&2; fail "no table row '$row'"; }
done
[ "$(grep -c '^BEGIN IONS' "$work/gen/test.mgf")" = 24 ] || fail "test.mgf: not 24 spectra"
[ "$(grep -c '^Name: ' "$work/gen/train.msp")" = 96 ] || fail "train.msp: not 96 spectra"
[ "$(wc -l <"$work/gen/results.csv")" = 4 ] || fail "results.csv: not a header, 2 variants and the baseline"
[ -s "$work/gen/positional_encoding.png" ] || fail "no positional_encoding.png"
echo "ok   generated spectra: MSP and MGF written and read, 2 variants and the baseline"

# The checkpoints: evaluate gives the table's metrics; predict and embed a row per spectrum.
action=(--backend "$first_host_backend" spectra)
for variant in full neither; do
  [ -s "$work/gen/$variant/model.safetensors" ] || fail "no checkpoint of $variant"
  "$kformer" "${action[@]}" evaluate --checkpoint "$work/gen/$variant" --data "$work/gen/test.mgf" \
    >"$work/evaluate.log" 2>&1 || { cat "$work/evaluate.log" >&2; fail "evaluate $variant failed"; }
  table=$(awk -v v="$variant" '$1 == v && $2 != "epoch" { print $4, $5, $6 }' "$work/gen.log")
  evaluated=$(sed -n 's/.*Tanimoto \([0-9.]*\)  F1 \([0-9.]*\)  class accuracy \([0-9.]*\)$/\1 \2 \3/p' \
    "$work/evaluate.log")
  [ -n "$table" ] && [ "$table" = "$evaluated" ] ||
    { cat "$work/gen.log" "$work/evaluate.log" >&2; fail "evaluate $variant: '$evaluated', the table '$table'"; }
done
echo "ok   evaluate: each checkpoint gives its row of the table ($evaluated for neither)"
"$kformer" "${action[@]}" predict --checkpoint "$work/gen/full" --data "$work/gen/test.mgf" \
  --output "$work/predictions.csv" >"$work/predict.log" 2>&1 || { cat "$work/predict.log" >&2; fail "predict failed"; }
[ "$(wc -l <"$work/predictions.csv")" = 25 ] || fail "predictions.csv: not a header and 24 rows"
[ "$(head -1 "$work/predictions.csv" | tr ',' '\n' | wc -l)" = 40 ] ||
  fail "predictions.csv: not index, title, class, fingerprint, 4 class and 32 bit probabilities"
"$kformer" "${action[@]}" embed --checkpoint "$work/gen/full" --data "$work/gen/test.mgf" \
  --output "$work/embeddings.csv" >"$work/embed.log" 2>&1 || { cat "$work/embed.log" >&2; fail "embed failed"; }
[ "$(wc -l <"$work/embeddings.csv")" = 25 ] || fail "embeddings.csv: not a header and 24 rows"
[ "$(head -1 "$work/embeddings.csv" | tr ',' '\n' | wc -l)" = 18 ] || fail "embeddings.csv: not 16 values a row"
echo "ok   predict and embed: a row per spectrum"

"$kformer" "${small[@]}" --variant full --pos-encoding learnable --output-dir "$work/learnable" \
  >"$work/learnable.log" 2>&1 || { cat "$work/learnable.log" >&2; fail "the learnable encoding failed"; }
grep -q "^full  *learnable " "$work/learnable.log" || { cat "$work/learnable.log" >&2; fail "no learnable row"; }
"$kformer" "${action[@]}" evaluate --checkpoint "$work/learnable/full" --data "$work/learnable/test.mgf" \
  >"$work/evaluate.log" 2>&1 || { cat "$work/evaluate.log" >&2; fail "evaluate learnable failed"; }
echo "ok   a learnable positional encoding, trained and evaluated"

# refuse_action NAME PATTERN ARGS...: non-zero exit and PATTERN in the output.
refuse_action() {
  local name=$1 pattern=$2 status=0
  shift 2
  "$kformer" "${action[@]}" "$@" >"$work/refused.log" 2>&1 || status=$?
  [ "$status" -ne 0 ] && grep -qF -- "$pattern" "$work/refused.log" ||
    { cat "$work/refused.log" >&2; fail "$name: not refused as expected (exit $status)"; }
  echo "ok   $name: refused ($(grep -m1 -F -- "$pattern" "$work/refused.log" | cut -c1-110))"
}
cp "$work/gen/test.mgf" "$work/test_copy.mgf"
refuse_action "predict over its data" "is the --data file" predict --checkpoint "$work/gen/full" \
  --data "$work/test_copy.mgf" --output "$work/test_copy.mgf"
cmp -s "$work/gen/test.mgf" "$work/test_copy.mgf" || fail "predict over its data: the data changed"
refuse_action "embed into the checkpoint" "is inside the --checkpoint directory" embed \
  --checkpoint "$work/gen/full" --data "$work/gen/test.mgf" --output "$work/gen/full/model.safetensors"
refuse_action "a directory without a checkpoint" "model.safetensors" evaluate \
  --checkpoint "$work/gen" --data "$work/gen/test.mgf"
status=0
"$kformer" "${small[@]}" --variant full --output-dir "$work/gen" >"$work/again.log" 2>&1 || status=$?
[ "$status" -ne 0 ] && grep -q "already holds the checkpoint" "$work/again.log" ||
  { cat "$work/again.log" >&2; fail "a second run over the checkpoints: not refused (exit $status)"; }
echo "ok   a second run over the first's checkpoints: refused without --overwrite"

"$kformer" "${small[@]}" --variant full --train "$work/gen/test.mgf" --test "$work/gen/train.msp" \
  --output-dir "$work/user" >"$work/user.log" 2>&1 ||
  { cat "$work/user.log" >&2; fail "the run on the user's files failed"; }
grep -q "training 24 spectra, test 96" "$work/user.log" || fail "the user's files: not 24 + 96"
echo "ok   the user's MGF and MSP files"

# refuse NAME PATTERN ARGS...: non-zero exit, PATTERN in the output, no output directory.
refuse() {
  local name=$1 pattern=$2 status=0
  shift 2
  rm -rf "$work/refused"
  "$kformer" "${small[@]}" "$@" --output-dir "$work/refused" >"$work/refused.log" 2>&1 || status=$?
  [ "$status" -ne 0 ] && grep -qF -- "$pattern" "$work/refused.log" ||
    { cat "$work/refused.log" >&2; fail "$name: not refused as expected (exit $status)"; }
  [ ! -e "$work/refused" ] || fail "$name: refused, but wrote $work/refused"
  echo "ok   $name: refused ($(grep -m1 -F -- "$pattern" "$work/refused.log" | cut -c1-110))"
}
# spectrum 3's first peak line loses its intensity
awk '/^Name: / { n++ } n == 3 && /^[0-9]/ && !done { print $1; done = 1; next } { print }' \
  "$work/gen/train.msp" >"$work/bad.msp"
refuse "a malformed spectrum mid-file" "spectrum 3 'generated_00003': the peak m/z" \
  --train "$work/bad.msp" --test "$work/gen/test.mgf"
sed '/^END IONS/{x;s/^/x/;/^x\{5\}$/{x;d};x}' "$work/gen/test.mgf" >"$work/no_end.mgf"
refuse "an END IONS missing" "'BEGIN IONS' before this spectrum's 'END IONS'" \
  --train "$work/gen/train.msp" --test "$work/no_end.mgf"
cp "$work/gen/test.mgf" "$work/spectra.txt"
refuse "an unknown extension" "expected an .msp or .mgf file, got the extension '.txt'" \
  --train "$work/spectra.txt" --test "$work/gen/test.mgf"
grep -v '^fingerprint=' "$work/gen/test.mgf" >"$work/unlabelled.mgf"
refuse "spectra without fingerprints" "spectrum 1 'generated_00097' has no 'Fingerprint' field" \
  --train "$work/gen/train.msp" --test "$work/unlabelled.mgf"
refuse_action "evaluate on spectra without fingerprints" "spectrum 1 'generated_00097' has no 'Fingerprint' field" \
  evaluate --checkpoint "$work/gen/full" --data "$work/unlabelled.mgf"
"$kformer" "${action[@]}" predict --checkpoint "$work/gen/full" --data "$work/unlabelled.mgf" \
  --output "$work/unlabelled.csv" >"$work/predict.log" 2>&1 || { cat "$work/predict.log" >&2; fail "predict without labels failed"; }
echo "ok   predict needs no labels"
refuse "--train without --test" "--train and --test go together" --train "$work/gen/train.msp"
mkdir -p "$work/inplace"
cp "$work/gen/test.mgf" "$work/inplace/results.csv"
status=0
"$kformer" "${small[@]}" --train "$work/gen/train.msp" --test "$work/inplace/results.csv" \
  --output-dir "$work/inplace" >"$work/inplace.log" 2>&1 || status=$?
[ "$status" -ne 0 ] && grep -q "would write as results.csv" "$work/inplace.log" ||
  { cat "$work/inplace.log" >&2; fail "an output over an input: not refused (exit $status)"; }
cmp -s "$work/gen/test.mgf" "$work/inplace/results.csv" || fail "an output over an input: the input changed"
echo "ok   an output over an input: refused, the input unchanged"
