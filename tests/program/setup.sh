# Sourced by the program tests: takes KFORMER_PROGRAM and WORK_DIR from the test's arguments into
# $kformer and $work, empties the work directory and writes the generated datasets to $work/data.
kformer=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
"$kformer" generate-data --output-dir "$work/data" >/dev/null 2>&1 || exit 1
