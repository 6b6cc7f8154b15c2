#!/usr/bin/env bash
# The kformer program under faults: SIGKILL at random moments of runs that save often (each time
# the directory holds a checkpoint that loads, or none, and the metrics list no epoch the
# checkpoint does not have; the next start removes the killed run's temporary files); two runs
# started on one output directory (the second is refused while the first holds it, and the first
# finishes unharmed); and a full disk (a 2 MiB tmpfs, where the kernel allows mounting one): the
# run fails with the system's reason, and the files there before are byte for byte as they were.
#
#   faults.sh KFORMER_PROGRAM WORK_DIR
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" "$@"
fail() { echo "FAIL: $*" >&2; exit 1; }
small=(--backend "$first_host_backend" --no-progress pretrain --data "$work/data/regression_train.ts"
       --test "$work/data/regression_test.ts" --d-model 16 --heads 2 --layers 1
       --dim-feedforward 32 --batch-size 64 --seed 3)

# --- SIGKILL at random moments -------------------------------------------------------------
kills=10
RANDOM=7
for k in $(seq "$kills"); do
  dir=$work/killed_$k
  "$kformer" "${small[@]}" --epochs 40 --output-dir "$dir" >"$work/killed.log" 2>&1 &
  pid=$!
  sleep "0.$((RANDOM % 9 + 1))$((RANDOM % 10))"  # 0.10 to 0.99 s: before, during or between saves
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ -f "$dir/model.safetensors" ]; then
    "$kformer" --backend "$first_host_backend" evaluate --checkpoint "$dir" \
      --data "$work/data/regression_test.ts" >"$work/evaluate.log" 2>&1 ||
      { cat "$work/evaluate.log" >&2; fail "kill $k left a checkpoint that does not load"; }
    saved=$(python3 -c "import json,sys; print(json.load(open('$dir/config.json'))['next_epoch'])" 2>/dev/null ||
      sed -n 's/.*"next_epoch": \([0-9]*\).*/\1/p' "$dir/config.json")
    if [ -f "$dir/metrics.csv" ]; then
      listed=$(awk -F, 'NR > 1 && $1 == "pretrain" { last = $2 } END { print last + 0 }' "$dir/metrics.csv")
      [ "$listed" -le "$saved" ] ||
        fail "kill $k: metrics.csv lists epoch $listed, the checkpoint holds $saved epochs"
    fi
    # A resumed start removes the temporary files the killed run left.
    "$kformer" "${small[@]}" --epochs 1 --output-dir "$dir" --resume >"$work/resume.log" 2>&1 ||
      { cat "$work/resume.log" >&2; fail "kill $k: --resume from the left checkpoint failed"; }
    ! ls "$dir" | grep -q '\.tmp\.' || fail "kill $k: temporary files remain: $(ls "$dir")"
  fi
done
echo "ok   $kills random kills: every checkpoint left loads and resumes, metrics never ahead of it"

# --- two runs on one directory ---------------------------------------------------------------
"$kformer" "${small[@]}" --epochs 6 --output-dir "$work/shared" >"$work/first.log" 2>&1 &
first=$!
for _ in $(seq 400); do [ -d "$work/shared" ] && break; sleep 0.01; done
sleep 0.2
status=0
"$kformer" "${small[@]}" --epochs 6 --output-dir "$work/shared" --overwrite >"$work/second.log" 2>&1 ||
  status=$?
wait "$first" || { cat "$work/first.log" >&2; fail "the first run failed beside a second one"; }
[ "$status" -ne 0 ] && grep -q "another kformer run is writing to" "$work/second.log" ||
  { cat "$work/second.log" >&2; fail "a second run on the same directory was not refused"; }
"$kformer" --backend "$first_host_backend" evaluate --checkpoint "$work/shared" \
  --data "$work/data/regression_test.ts" >/dev/null 2>&1 || fail "the first run's checkpoint does not load"
echo "ok   a second run on a directory in use is refused; the first finishes and loads"

# --- a full disk -----------------------------------------------------------------------------
disk=$work/disk
mkdir -p "$disk"
if ! mount -t tmpfs -o size=2m tmpfs "$disk" 2>/dev/null; then
  echo "skip the full disk: this machine does not let the test mount a tmpfs"
  exit 0
fi
trap 'umount "$disk" 2>/dev/null' EXIT
head -c 1500000 /dev/zero >"$disk/ballast"  # leaves about 0.5 MiB
"$kformer" "${small[@]}" --epochs 1 --output-dir "$disk/before" >/dev/null 2>&1 ||
  fail "the small checkpoint did not fit in the disk's free space before filling it"
before=$(cd "$disk" && find . -type f ! -name ballast -exec sha256sum {} + | sort)
head -c 450000 /dev/zero >"$disk/more_ballast"
status=0
"$kformer" --backend "$first_host_backend" --no-progress pretrain --data "$work/data/regression_train.ts" \
  --test "$work/data/regression_test.ts" --d-model 64 --heads 2 --layers 2 --epochs 1 \
  --output-dir "$disk/big" >"$work/full.log" 2>&1 || status=$?
[ "$status" -ne 0 ] && grep -q "No space left on device" "$work/full.log" ||
  { cat "$work/full.log" >&2; fail "a checkpoint on a full disk did not fail with the system's reason (exit $status)"; }
status=0
"$kformer" encode --dim 512 --len 4096 --csv "$disk/pe.csv" >"$work/encode.log" 2>&1 || status=$?
[ "$status" -ne 0 ] && grep -q "No space left on device" "$work/encode.log" ||
  { cat "$work/encode.log" >&2; fail "encode --csv on a full disk did not fail (exit $status)"; }
[ ! -e "$disk/pe.csv" ] || fail "encode left a partial $disk/pe.csv"
! ls -R "$disk" | grep -q '\.tmp\.' || fail "temporary files remain on the full disk: $(ls -R "$disk")"
after=$(cd "$disk" && find . -type f ! -name ballast ! -name more_ballast -exec sha256sum {} + | sort)
[ "$before" = "$after" ] || fail "files on the full disk changed: $(diff <(echo "$before") <(echo "$after"))"
echo "ok   a full disk: the checkpoint and encode --csv fail naming it, nothing partial is left"
