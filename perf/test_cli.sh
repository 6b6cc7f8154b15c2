#!/bin/sh
# The perf tools' command lines: bad arguments are refused with exit status 2 and a message naming
# the argument, before anything is timed; good ones list the cases. Little is timed: kformer-bench
# lists, but for one short --profile run, and side_by_side.py gets a stand-in for it. A few
# seconds.
#   Usage: test_cli.sh PATH/TO/kformer-bench [PYTHON3]
# With PYTHON3, perf/compare_pytorch.py and perf/side_by_side.py too, under a stand-in torch
# package that refuses to be imported (their checks and --list must not need PyTorch, a test-time
# requirement never), and both benchmarks must select the same cases for the same --filter, but for
# those only kformer-bench has.
set -u
bench="$1"
python="${2:-}"
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failures=0

# run_tool ARGS...: the tool under test, $tool (kformer-bench, compare_pytorch.py or
# side_by_side.py), with ARGS.
tool=kformer-bench
run_tool() {
  case "$tool" in
    kformer-bench) "$bench" "$@" ;;
    *) "$python" "$here/$tool" "$@" ;;
  esac
}

# expect STATUS PATTERN ARGS...: run_tool ARGS exits with STATUS and prints PATTERN.
expect() {
  status="$1" pattern="$2"
  shift 2
  run_tool "$@" >"$out/log" 2>&1
  got=$?
  if [ "$got" -ne "$status" ] || ! grep -q -- "$pattern" "$out/log"; then
    echo "FAIL: $tool $*: exit $got (expected $status), output:"
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
# A profile counts the timed runs only, not the two warm-ups before them.
expect 0 " 3 calls  kformer::positional_encoding::add$" \
  --profile --backend serial --filter encoding.fixed.add --repeat 3
if [ -e "$out/r.json" ]; then
  echo "FAIL: a refused --json run left $out/r.json behind"
  failures=$((failures + 1))
fi

# The host BLAS line, where OpenBLAS is linked in: it names the kernels OPENBLAS_CORETYPE asks
# for, and the note about AVX-512 appears exactly when a CPU that has it gets AVX2 kernels.
if ldd "$bench" 2>/dev/null | grep -q libopenblas; then
  avx512=yes
  for flag in avx512f avx512cd avx512bw avx512dq avx512vl; do
    grep -m1 '^flags' /proc/cpuinfo | grep -qw "$flag" || avx512=no
  done
  avx2=yes
  grep -m1 '^flags' /proc/cpuinfo | grep -qw avx2 || avx2=no
  for kernels in Haswell SkylakeX; do
    [ "$kernels" = Haswell ] && [ "$avx2" = no ] && continue  # OpenBLAS would not run them
    [ "$kernels" = SkylakeX ] && [ "$avx512" = no ] && continue
    OPENBLAS_CORETYPE=$kernels "$bench" --list --filter encoding.copy >"$out/log" 2>&1
    note="note: this CPU has AVX-512 but OpenBLAS runs its Haswell (AVX2) kernels"
    note="$note (OPENBLAS_CORETYPE=Haswell in the environment)"
    if ! grep -q "^  host BLAS: OpenBLAS .* $kernels " "$out/log"; then
      echo "FAIL: OPENBLAS_CORETYPE=$kernels kformer-bench --list names no $kernels kernels:"
      sed 's/^/  | /' "$out/log"
      failures=$((failures + 1))
    elif [ "$avx512$kernels" = yesHaswell ] && ! grep -qF "$note" "$out/log"; then
      echo "FAIL: AVX-512 CPU, Haswell kernels, but no note: $(cat "$out/log")"
      failures=$((failures + 1))
    elif [ "$avx512$kernels" != yesHaswell ] && grep -q "note: this CPU" "$out/log"; then
      echo "FAIL: a note about AVX-512 with $kernels kernels (AVX-512: $avx512): $(cat "$out/log")"
      failures=$((failures + 1))
    fi
  done
fi

if [ -n "$python" ]; then
  mkdir -p "$out/no-torch/torch"
  echo 'raise ImportError("the stand-in torch of test_cli.sh")' >"$out/no-torch/torch/__init__.py"
  export PYTHONPATH="$out/no-torch"
  tool=compare_pytorch.py
  expect 0 "^encoding.fixed.inplace$" --list --filter encoding.fixed
  expect 0 "^scaling.seq.4096.train_step$" --list --filter "scaling.seq.*"
  expect 2 "no case matches --filter 'fixed\*'" --list --filter "fixed*"
  expect 2 "repeat: needs a whole number from 1 to 100000, got '0'" --list --repeat 0
  expect 2 "repeat: needs a whole number from 1 to 100000, got '12abc'" --list --repeat 12abc
  expect 2 "threads: needs a whole number from 1 to 4096, got '-1'" --list --threads=-1
  expect 2 "no case matches --filter 'no.such.case'" --filter no.such.case
  expect 2 "cannot write --json $out/missing/r.json: No such file or directory" \
    --filter encoding.fixed.add --json "$out/missing/r.json"
  expect 2 "json cannot go with --list" --list --json "$out/r.json"
  expect 2 "timing the cases needs PyTorch (Debian's python3-torch): the stand-in torch" \
    --filter linear.forward --repeat 1
  expect 2 "unrecognized arguments: --bogus" --bogus

  # side_by_side.py runs both: its own arguments are refused before either runs, and a child that
  # cannot start or fails ends it with one line naming the child. The stand-in kformer-bench
  # succeeds without timing anything; compare_pytorch.py then fails on the stand-in torch.
  tool=side_by_side.py
  expect 2 "threads: needs a whole number from 1 to 4096, got '0'" --threads 0
  expect 2 "repeat: needs a whole number from 1 to 100000, got 'many'" --repeat many
  expect 1 "cannot run $out/no-such-bench: No such file or directory" --bench "$out/no-such-bench"
  printf '#!/bin/sh\nwhile [ "$1" != --json ]; do shift; done\necho "{\\"results\\": []}" >"$2"\n' \
    >"$out/stand-in-bench"
  chmod +x "$out/stand-in-bench"
  expect 1 "side_by_side.py: compare_pytorch.py failed (exit status 2)" --bench "$out/stand-in-bench" \
    --filter linear.forward --repeat 1
  tool=compare_pytorch.py

  # The same filter selects the same cases in both, but for kformer-only ones (kformer_only): the
  # portable attention kernel's cases exist where the backend has a specialised one.
  kformer_only="encoding.cached_table.add encoding.fixed.matrix encoding.learnable.backward
encoding.learnable.forward encoding.value.add linear.backward.reproducible
linear.forward.reproducible attention.tst_default.forward.portable
attention.tst_default.train_step.portable attention.long.forward.portable
attention.long.train_step.portable"
  for filter in "" train_step "encoding.fixed.*" "*.forward" attention "scaling.batch" "t?t.*"; do
    "$bench" --list --backend serial --filter "$filter" 2>/dev/null |
      awk 'listing && NF && $1 !~ /^limit\./ {print $1} /^case /{listing=1}' | sort >"$out/kformer"
    run_tool --list --filter "$filter" 2>/dev/null | sort >"$out/pytorch"
    printf '%s\n' $kformer_only | sort >"$out/only"
    missing=$(comm -23 "$out/kformer" "$out/pytorch" | comm -23 - "$out/only")
    extra=$(comm -13 "$out/kformer" "$out/pytorch")
    if [ ! -s "$out/pytorch" ] || [ -n "$missing$extra" ]; then
      echo "FAIL: --filter '$filter' selects different cases: only kformer-bench: $missing;" \
        "only compare_pytorch.py: $extra (compare_pytorch.py selected $(wc -l <"$out/pytorch"))"
      failures=$((failures + 1))
    fi
  done
fi

if [ -n "$python" ]; then
  # compare_onnxruntime.py: its checks and --list need neither torch nor onnxruntime, and it
  # lists the model cases' inference runs that kformer-bench has.
  tool=compare_onnxruntime.py
  expect 0 "^attention.long.forward$" --list --filter attention
  expect 0 "^tst.default.inference$" --list
  expect 2 "no inference case matches --filter 'linear'" --list --filter linear
  expect 2 "threads: needs a whole number from 1 to 4096, got '0'" --list --threads 0
  expect 2 "needs torch 2.x, onnx and onnxruntime from PyPI" --filter attention.long --repeat 1
  "$bench" --list --backend serial 2>/dev/null |
    awk 'listing && NF {print $1} /^case /{listing=1}' | sort >"$out/kformer"
  run_tool --list 2>/dev/null | sort >"$out/onnx"
  extra=$(comm -13 "$out/kformer" "$out/onnx")
  if [ ! -s "$out/onnx" ] || [ -n "$extra" ]; then
    echo "FAIL: compare_onnxruntime.py lists cases kformer-bench does not have: $extra"
    failures=$((failures + 1))
  fi
  tool=compare_pytorch.py
  expect 2 "label must start with 'pytorch'" --list --label torch2
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
if [ -n "$python" ]; then
  echo "all command-line checks passed (kformer-bench, compare_pytorch.py, side_by_side.py)"
else
  echo "all kformer-bench command-line checks passed (the Python tools not checked: no Python 3)"
fi
