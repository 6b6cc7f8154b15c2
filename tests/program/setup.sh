# Sourced by the program tests: takes KFORMER_PROGRAM and WORK_DIR from the test's arguments into
# $kformer and $work, empties the work directory, writes the generated datasets to $work/data and
# lists the build's host backends in $host_backends ("serial openmp", or one of them).
kformer=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
"$kformer" generate-data --output-dir "$work/data" >/dev/null 2>&1 || exit 1
host_backends=$("$kformer" info 2>/dev/null | sed -n 's/^  \(serial\|openmp\|threads\): .*memory Host.*/\1/p' | xargs)
[ -n "$host_backends" ] || { echo "FAIL: kformer info lists no host backend" >&2; exit 1; }
first_host_backend=${host_backends%% *}
