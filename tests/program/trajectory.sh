#!/usr/bin/env bash
# kformer trajectory: generates a system's trajectories (or reads a user's CSV), trains the
# volume-preserving and the standard transformer integrators with and without positional
# encoding, rolls them out and writes the table, the CSVs and the plot's script; bad input (a
# window longer than the trajectories, a prediction window outside [1, seq-length], missing
# values, trajectories of other lengths, one coordinate, an output over the input) is refused with
# a message naming the value, and nothing is written.
#
#   trajectory.sh KFORMER_PROGRAM WORK_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" "$@"
fail() { echo "FAIL: $*" >&2; exit 1; }
small=(--backend "$first_host_backend" trajectory --epochs 3 --trajectories 3 --steps 20
       --validation-trajectories 2 --rollout-steps 30)

"$kformer" "${small[@]}" --output-dir "$work/rigid" >"$work/rigid.log" 2>&1 ||
  { cat "$work/rigid.log" >&2; fail "the rigid-body run failed"; }
for label in "vpt " "vpt + encoding" "standard " "standard + encoding"; do
  grep -q "^$label" "$work/rigid.log" || { cat "$work/rigid.log" >&2; fail "no table row '$label'"; }
done
[ "$(wc -l <"$work/rigid/rollout_error.csv")" = 31 ] || fail "rollout_error.csv: not 30 steps and a header"
head -n1 "$work/rigid/rollout_error.csv" | grep -q "^step,vpt_error,vpt_invariant_drift,vpt_encoding_error" ||
  fail "rollout_error.csv: unexpected header $(head -n1 "$work/rigid/rollout_error.csv")"
[ "$(head -n1 "$work/rigid/rollout.csv" | tr ',' '\n' | wc -l)" = $((1 + 3 * 5)) ] ||
  fail "rollout.csv: expected step, 3 true and 4 x 3 predicted coordinates"
# the first seq-length states are given, not predicted: zero error there
awk -F, 'NR >= 2 && NR <= 4 && $2 + 0 > 1e-6 { bad = 1 } END { exit bad }' "$work/rigid/rollout_error.csv" ||
  fail "the given states of the rollout differ from the data"
[ -f "$work/rigid/rollout.gp" ] || fail "no rollout.gp"
echo "ok   rigid body: 4 runs, table, CSVs and plot script"

"$kformer" "${small[@]}" --system coupled-oscillators --model vpt --positional-encoding off \
  --seq-length 2 --prediction-window 1 --output-dir "$work/oscillators" >"$work/oscillators.log" 2>&1 ||
  { cat "$work/oscillators.log" >&2; fail "the coupled-oscillators run failed"; }
grep -q "4 coordinates" "$work/oscillators.log" || fail "coupled oscillators: not 4 coordinates"
[ "$(grep -c '^vpt\|^standard' "$work/oscillators.log")" = 1 ] || fail "coupled oscillators: not one run"
echo "ok   coupled oscillators, one model"

# A user's trajectories: 5 circles, (cos, sin) of a phase advancing 0.2 per step.
{
  echo "series_id,x,y"
  for t in 1 2 3 4 5; do
    awk -v t="$t" 'BEGIN { for (s = 0; s < 25; ++s) printf "c%d,%.9f,%.9f\n", t, cos(t + 0.2 * s), sin(t + 0.2 * s) }'
  done
} >"$work/circles.csv"
"$kformer" --backend "$first_host_backend" trajectory --data "$work/circles.csv" --epochs 2 \
  --model standard --positional-encoding off --output-dir "$work/user" >"$work/user.log" 2>&1 ||
  { cat "$work/user.log" >&2; fail "the run on a user's CSV failed"; }
grep -q "training 4 trajectories x 25 steps, validation 1 x 25" "$work/user.log" ||
  { cat "$work/user.log" >&2; fail "the user's CSV: not split 4 + 1"; }
echo "ok   a user's CSV of trajectories"

# refuse NAME PATTERN ARGS...: non-zero exit, PATTERN in the output, no output directory.
refuse() {
  local name=$1 pattern=$2 status=0
  shift 2
  rm -rf "$work/refused"
  "$kformer" --backend "$first_host_backend" trajectory "$@" --output-dir "$work/refused" \
    >"$work/refused.log" 2>&1 || status=$?
  [ "$status" -ne 0 ] && grep -q -- "$pattern" "$work/refused.log" ||
    { cat "$work/refused.log" >&2; fail "$name: not refused as expected (exit $status)"; }
  [ ! -e "$work/refused" ] || fail "$name: refused, but wrote $work/refused"
  echo "ok   $name: refused ($(grep -m1 -- "$pattern" "$work/refused.log" | cut -c1-100))"
}
refuse "a window longer than the trajectories" "--steps must be at least --seq-length + --prediction-window (9)" \
  --seq-length 5 --prediction-window 4 --steps 6
refuse "a prediction window of zero" "prediction-window" --prediction-window 0
refuse "a prediction window beyond the window" "--prediction-window must be between 1 and --seq-length (3), got 4" \
  --prediction-window 4
sed '4s/,[^,]*$/,nan/' "$work/circles.csv" >"$work/nan.csv"
refuse "a missing value" "trajectory 1, step 3, coordinate 2 is missing or not finite" --data "$work/nan.csv"
sed '30d' "$work/circles.csv" >"$work/ragged.csv"
refuse "trajectories of other lengths" "trajectory 2 has 24, expected 25" --data "$work/ragged.csv"
cut -d, -f1,2 "$work/circles.csv" >"$work/one_coordinate.csv"
refuse "one coordinate" "need at least 2 coordinates, got 1" --data "$work/one_coordinate.csv"
refuse "trajectories shorter than a window" "shorter than --seq-length + --prediction-window (40)" \
  --data "$work/circles.csv" --seq-length 20 --prediction-window 20
mkdir -p "$work/inplace"
cp "$work/circles.csv" "$work/inplace/rollout.csv"
status=0
"$kformer" trajectory --data "$work/inplace/rollout.csv" --output-dir "$work/inplace" \
  >"$work/inplace.log" 2>&1 || status=$?
[ "$status" -ne 0 ] && grep -q "would write as rollout.csv" "$work/inplace.log" ||
  { cat "$work/inplace.log" >&2; fail "an output over the input: not refused (exit $status)"; }
cmp -s "$work/circles.csv" "$work/inplace/rollout.csv" || fail "an output over the input: the input changed"
echo "ok   an output over the input: refused, the input unchanged"
