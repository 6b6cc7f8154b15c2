#!/usr/bin/env bash
# The online-training example in C and in Fortran (examples/online_training): each must run, its
# surrogate's loss must fall, a reloaded checkpoint must give the same outputs, and the two
# programs must print the same losses and errors (to 1e-9 relative: the same C API on the same
# arithmetic). Exit 77 (skipped) when this build has no Fortran compiler.
#
#   online_training.sh WORK_DIR C_PROGRAM [FORTRAN_PROGRAM]
set -uo pipefail
work=$1 c_program=$2 fortran_program=${3:-}
mkdir -p "$work"
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }
"$c_program" "$work/c.safetensors" >"$work/c.log" 2>&1 || { cat "$work/c.log" >&2; fail "the C example failed"; }
cat "$work/c.log"
grep -q "reloaded model: same outputs" "$work/c.log" || fail "C: the reloaded model differs"
awk '/^step/ { if (!seen) first = $4 + 0; seen = 1; last = $4 + 0 } END { exit !(seen && last < first) }' \
  "$work/c.log" || fail "C: the loss did not fall"
if [ -z "$fortran_program" ]; then
  echo "skipped the Fortran example: no Fortran compiler in this build"
  exit 77
fi
"$fortran_program" "$work/fortran.safetensors" >"$work/fortran.log" 2>&1 ||
  { cat "$work/fortran.log" >&2; fail "the Fortran example failed"; }
cat "$work/fortran.log"
paste -d' ' <(grep '^step' "$work/c.log") <(grep '^step' "$work/fortran.log") | awk '
  function close_to(a, b) { d = a - b; if (d < 0) d = -d; s = a < 0 ? -a : a; return d <= 1e-9 * s + 1e-300 }
  { if ($2 != $8 || !close_to($4 + 0, $10 + 0) || !close_to($6 + 0, $12 + 0)) { print "differ: " $0; bad = 1 } ++n }
  END { exit bad || n != 4 }' || fail "the C and Fortran examples differ"
grep -q "reloaded model: same outputs" "$work/fortran.log" || fail "Fortran: the reloaded model differs"
echo "ok   C and Fortran: the same 4 reports, the loss falling, reloaded models the same"
