#!/usr/bin/env bash
# With --reproducible, training gives the same bits on Serial and on OpenMP with 1 or 2 threads
# (the host BLAS alone depends on its thread count; see backends::set_reproducible_gemm). A build
# with OpenMP only compares its 1- and 2-thread runs; one with Serial only has no threads to vary
# and skips (exit status 77).
#
#   thread_reproducibility.sh KFORMER_PROGRAM WORK_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" "$@"
train() {  # backend threads output
  OMP_NUM_THREADS=$2 OMP_PROC_BIND=false "$kformer" --backend "$1" --reproducible --no-progress \
    pretrain --data "$work/data/regression_train.ts" --test "$work/data/regression_test.ts" \
    --epochs 2 --d-model 32 --heads 4 --layers 2 --dim-feedforward 64 --batch-size 32 --seed 5 \
    --output-dir "$work/$3" >"$work/$3.log" 2>&1
}
case " $host_backends " in
  *" openmp "*) ;;
  *) echo "SKIP: this build's host backends ($host_backends) have no threads to vary"; exit 77 ;;
esac
trained=()
case " $host_backends " in
  *" serial "*) train serial 1 serial && trained+=(serial) ;;
esac
train openmp 1 openmp1
train openmp 2 openmp2
trained+=(openmp1 openmp2)
for run in "${trained[@]:1}"; do
  if ! cmp "$work/${trained[0]}/model.safetensors" "$work/$run/model.safetensors"; then
    echo "FAIL: $run's checkpoint differs from ${trained[0]}'s" >&2
    exit 1
  fi
done
echo "${trained[*]} (backends and threads): identical checkpoints after 2 epochs"
