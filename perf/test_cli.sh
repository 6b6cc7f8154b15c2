#!/bin/sh
# kformer-bench's command line: bad arguments are refused with exit status 2 and a message naming
# the argument, before anything is timed; good ones list the cases. Only --list runs, so this
# takes a second. Usage: test_cli.sh PATH/TO/kformer-bench
set -u
bench="$1"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failures=0

# expect STATUS PATTERN ARGS...: kformer-bench ARGS exits with STATUS and prints PATTERN.
expect() {
  status="$1" pattern="$2"
  shift 2
  "$bench" "$@" >"$out/log" 2>&1
  got=$?
  if [ "$got" -ne "$status" ] || ! grep -q -- "$pattern" "$out/log"; then
    echo "FAIL: kformer-bench $*: exit $got (expected $status), output:"
    sed 's/^/  | /' "$out/log"
    echo "  (expected a line matching: $pattern)"
    failures=$((failures + 1))
  fi
}

expect 0 "^encoding.fixed.inplace " --list --filter encoding.fixed
expect 0 "^tst.default.train_step " --list --backend serial --filter tst.default
expect 0 "^encoding.learnable.forward " --list --filter "encoding.*.forward"
expect 2 "no case matches 'fixed\*'" --list --filter "fixed*"  # a glob matches whole names
expect 2 "repeat needs a whole number from 1 to 100000, got '0'" --list --repeat 0
expect 2 "repeat needs a whole number from 1 to 100000, got '-3'" --list --repeat -3
expect 2 "repeat needs a whole number from 1 to 100000, got '12abc'" --list --repeat 12abc
expect 2 "repeat needs a whole number from 1 to 100000, got '1e9'" --list --repeat 1e9
expect 2 "repeat needs a value" --list --repeat
expect 2 "no case matches 'no.such.case'" --filter no.such.case
expect 2 "backend 'no-such-space' is not enabled" --list --backend no-such-space
expect 2 "cannot write --json $out/missing/r.json: No such file or directory" \
  --filter encoding.fixed.add --json "$out/missing/r.json"
expect 2 "json cannot go with --list" --list --json "$out/r.json"
expect 2 "json cannot go with --profile" --profile --json "$out/r.json"
expect 2 "unknown argument '--bogus'" --bogus
if [ -e "$out/r.json" ]; then
  echo "FAIL: a refused --json run left $out/r.json behind"
  failures=$((failures + 1))
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all kformer-bench command-line checks passed"
