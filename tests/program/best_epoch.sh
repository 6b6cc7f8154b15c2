#!/usr/bin/env bash
# Best-epoch selection and early stopping, as TST's model_best.pth: fine-tuning keeps the epoch
# with the lowest validation loss in OUTPUT_DIR/best (the one metrics.csv lists as lowest, and
# evaluate on that checkpoint gives the same loss), --no-keep-best keeps none, --patience stops a
# run that no longer improves (lr 0 and LayerNorm, whose evaluation does not move with training:
# no epoch after the first is better), and --key-metric accuracy is refused for a model that has
# no accuracy, before anything is written.
#
#   best_epoch.sh KFORMER_PROGRAM WORK_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" "$@"
fail() { echo "FAIL: $*" >&2; exit 1; }
common=(--backend "$first_host_backend" --no-progress finetune
  --data "$work/data/classification_train.ts" --test "$work/data/classification_test.ts"
  --d-model 16 --heads 2 --layers 1 --dim-feedforward 32 --batch-size 32 --seed 5)

"$kformer" "${common[@]}" --epochs 8 --lr 3e-3 --output-dir "$work/kept" >"$work/kept.log" 2>&1 ||
  { cat "$work/kept.log" >&2; fail "the fine-tuning run failed"; }
kept=$(sed -n 's/^finetune: kept epoch \([0-9]*\) of 8 (validation loss \([0-9.]*\)).*/\1 \2/p' "$work/kept.log")
[ -n "$kept" ] || { cat "$work/kept.log" >&2; fail "the run does not say which epoch it kept"; }
read -r epoch loss <<<"$kept"
# The lowest validation loss in metrics.csv (run,epoch,train_loss,validation_loss,...), first wins.
lowest=$(awk -F, '$1 == "finetune" && (best == "" || $4 < best) { best = $4; at = $2 } END { print at }' \
  "$work/kept/metrics.csv")
[ "$epoch" = "$lowest" ] || fail "kept epoch $epoch, but metrics.csv's lowest validation loss is epoch $lowest's"
[ -f "$work/kept/best/model.safetensors" ] || fail "no checkpoint in $work/kept/best"
evaluated=$("$kformer" --backend "$first_host_backend" evaluate --checkpoint "$work/kept/best" \
  --data "$work/data/classification_test.ts" | sed -n 's/^validation loss \([0-9.]*\) .*/\1/p')
[ "$evaluated" = "$loss" ] ||
  fail "evaluate on $work/kept/best gives validation loss $evaluated, the run kept $loss"

"$kformer" "${common[@]}" --epochs 2 --no-keep-best --output-dir "$work/none" >"$work/none.log" 2>&1 ||
  { cat "$work/none.log" >&2; fail "the --no-keep-best run failed"; }
[ ! -e "$work/none/best" ] || fail "--no-keep-best wrote $work/none/best"

"$kformer" "${common[@]}" --epochs 10 --lr 0 --norm layernorm --patience 2 --output-dir "$work/patience" \
  >"$work/patience.log" 2>&1 || { cat "$work/patience.log" >&2; fail "the --patience run failed"; }
grep -q "stopped after epoch 3 of 10" "$work/patience.log" ||
  { cat "$work/patience.log" >&2; fail "with lr 0 and --patience 2 the run did not stop after epoch 3"; }
[ "$(grep -c '^finetune,' "$work/patience/metrics.csv")" = 3 ] || fail "metrics.csv does not list 3 epochs"

status=0
"$kformer" --backend "$first_host_backend" --no-progress pretrain \
  --data "$work/data/regression_train.ts" --epochs 1 --key-metric accuracy \
  --output-dir "$work/refused" >"$work/refused.log" 2>&1 || status=$?
[ "$status" -ne 0 ] && grep -q "key-metric accuracy needs a classification model" "$work/refused.log" ||
  { cat "$work/refused.log" >&2; fail "pretrain --key-metric accuracy was not refused"; }
[ ! -e "$work/refused" ] || fail "the refused run created $work/refused"
echo "kept epoch $epoch of 8 (validation loss $loss, evaluate agrees); --no-keep-best keeps none;" \
  "--patience 2 stopped after epoch 3; --key-metric accuracy refused for pretraining"
