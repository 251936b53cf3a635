#!/usr/bin/env bash
# The GPU session's work, in stages (benchmarks/gpu/README.md gives the device-tool calls).
# Runs on the GPU machine after the README's pip prefix, from the repository root:
#   bash benchmarks/gpu/session.sh STAGE...
# STAGE: tests    the whole test suite with CUDA: the gpu-marked tests first (they must pass, not
#                 skip), then the rest with pytest-xdist
#        shipped  nmt-specdec-evaluate on models/gettext-de-en-tiny: CUDA fp32 + --fp16, batch 1
#                 and 32, --ct2 when CTranslate2 decodes on this GPU (probed in setup)
#        base     a transformer_wmt_en_de verifier (6+6, d=512) trained with the reference
#                 verifier's fairseq-train recipe (+ --fp16, a GPU batch), a draft head added by
#                 nmt-specdec-add-draft-head, then the same evaluation at batch 8/32 and at batch 1
#        all      tests on the CPU cores while base trains on the GPU; then the evaluations, timed
#                 alone: base at 8/32, shipped, base at 1. One call of under 10 minutes.
#        train    base's training alone (e.g. TRAIN_MIN=8): the verifier stays in $WORK/verifier
#        head     base's draft head and evaluations on the verifier that train left there: only
#                 on the same machine, still warm (30 s after the last call); else it stops at once
#        part     (first, no setup) copies this call's part of the base model (PART=gpu_kit/baseN,
#                 base_parts.py) to $WORK/base: the parts travel in successive calls to one warm machine;
#                 "part gpu-tests" then runs the gpu-marked tests until DEADLINE_S
#        basehead (issue 47) joins the parts, exports the base verifier, trains a head onto it
#                 with nmt-specdec-add-draft-head (HEAD_SENTENCES, HEAD_MIN, HEAD_ARGS) and returns
#                 the head file (in parts of 15 MiB) and its report
#        static   the static loop and its CUDA graphs (issue 46): joins the parts into the reference
#                 base model (../shared/models/gettext-base, sha256 checked), then nmt-specdec-evaluate
#                 at batch 1 (BASE_B1_SENTENCES) and 8/32, fp32 and --fp16, graphs on and off
#                 (--graphs-off), --ct2, REPEATS timed passes; the CUDA tests (not with STATIC_TESTS=0:
#                 "part gpu-tests" ran them); the shipped model last
# Work goes under $WORK (default /tmp/specdec_gpu; checkpoints stay there). $OUT gets at most 8
# files: summary.md (stages, seconds, test results, the results tables), logs.tgz (every log,
# each evaluation's results.json/.md/.png, the head's report) and gpu_<eval>.json/.png for as
# many evaluations as fit. Every stage is bounded by DEADLINE_S (seconds from this script's
# start); an evaluation that would not fit is skipped, not started.
# Sizes and budgets come from the environment (defaults below). TINY=1 is the CPU rehearsal
# (benchmarks/gpu/tiny_check.sh): a few updates and sentences, --cpu, a test selection.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?OUT must be set (the device tool sets it)}"
START=$SECONDS
TINY=${TINY:-0}
PY=${PY:-python3}
WORK=${WORK:-/tmp/specdec_gpu}
KIT=${KIT:-gpu_kit/carry}
MODEL=models/gettext-de-en-tiny
LOGS=$WORK/logs
SUMMARY=$OUT/summary.md
mkdir -p "$OUT" "$WORK"
rm -rf "$LOGS" "$WORK"/eval_* && mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

: "${DEADLINE_S:=550}"          # the call's timeout_s less the pip prefix and a margin
if [[ $TINY == 1 ]]; then
  DEVICE=cpu
  : "${TRAIN_MIN:=1}" "${TRAIN_UPDATES:=3}" "${TRAIN_MAX_TOKENS:=1024}" "${TRAIN_SENTENCES:=1000}"
  : "${HEAD_MIN:=0.1}" "${HEAD_SENTENCES:=100}" "${HEAD_VALID:=10}"
  : "${BASE_BIG_SENTENCES:=4}" "${BASE_BIG_BATCHES:=4}" "${BASE_B1_SENTENCES:=2}"
  : "${SHIPPED_SENTENCES:=4}" "${SHIPPED_BATCHES:=1 4}"
  : "${TEST_ARGS:=tests/integration/test_cuda.py tests/integration/test_evaluation_cuda.py tests/unit/test_k_policy.py tests/robustness/test_translate_raw_text.py::test_console_script_reads_stdin}"
  : "${TEST_WORKERS:=2}"
  export NMT_SPECDEC_ONNX_CACHE=$WORK/onnx_cache  # CPU rows export ONNX: not into the user's cache
else
  DEVICE=cuda
  : "${TRAIN_MIN:=2}" "${TRAIN_UPDATES:=0}" "${TRAIN_MAX_TOKENS:=8192}" "${TRAIN_SENTENCES:=0}"
  : "${HEAD_MIN:=1}" "${HEAD_SENTENCES:=20000}" "${HEAD_VALID:=300}"
  : "${BASE_BIG_SENTENCES:=96}" "${BASE_BIG_BATCHES:=8 32}" "${BASE_B1_SENTENCES:=32}"
  : "${SHIPPED_SENTENCES:=64}" "${SHIPPED_BATCHES:=1 32}"
  : "${TEST_ARGS:=tests}"
  : "${TEST_WORKERS:=10}"
fi
: "${TRAIN_LR:=0.0007}" "${TRAIN_WARMUP:=500}" "${REPEATS:=1}" "${HEAD_ARGS:=}"
if [[ $TINY == 1 ]]; then  # the calls' sizes, capped for a CPU; the deadline of the rehearsal
  min() { echo $(( $1 < $2 ? $1 : $2 )); }
  HEAD_SENTENCES=$(min "$HEAD_SENTENCES" 100); BASE_BIG_SENTENCES=$(min "$BASE_BIG_SENTENCES" 4)
  BASE_B1_SENTENCES=$(min "$BASE_B1_SENTENCES" 2); SHIPPED_SENTENCES=$(min "$SHIPPED_SENTENCES" 4)
  HEAD_VALID=$(min "$HEAD_VALID" 10); REPEATS=$(min "$REPEATS" 2); HEAD_MIN=0.1
  BASE_BIG_BATCHES=4; SHIPPED_BATCHES="1 4"; TRAIN_UPDATES=3
  DEADLINE_S=${TINY_DEADLINE_S:-$DEADLINE_S}
fi
# Seconds kept free for what follows: the evaluations after training (EVALS_S), the shipped
# evaluation and base at batch 1 (SHIPPED_S, B1_S), later stages after the tests (TESTS_KEEP_S).
: "${EVALS_S:=250}" "${SHIPPED_S:=75}" "${B1_S:=90}" "${TESTS_KEEP_S:=15}"
: "${GRID:=--grid-k 2 4 --grid-auto --grid-beta 1 5 --grid-tau 1}"
# The static stage: its grid (beta=1 only, graphs on and off), the seconds kept for base at batch
# 8/32 and for the gpu tests, and which tests.
: "${STATIC_GRID:=--grid-k 2 4 --grid-auto --grid-beta 1 --graphs-off}"
: "${STATIC_BIG_S:=100}" "${GPU_TESTS_S:=150}" "${STATIC_TESTS:=1}"
: "${GPU_TEST_ARGS:=tests/integration/test_cuda.py tests/integration/test_evaluation_cuda.py}"
CT2_FLAG=""

note() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((DEADLINE_S - (SECONDS - START))); }
declare -A STAGE_T0
stage_begin() { STAGE_T0[$1]=$SECONDS; echo "== $1 (t=$((SECONDS - START)) s, $(left) s left)"; }
stage_end() {  # name rc [remark]
  note "| $1 | $2 | $((SECONDS - ${STAGE_T0[$1]})) | $((SECONDS - START)) | ${3:-} |"
}
pack() {  # logs and small products into $OUT/logs.tgz (checkpoints and data stay behind)
  tar -czf "$OUT/.logs.tgz" -C "$WORK" --exclude='*.pt' --exclude='*.bin' --exclude='*.idx' \
    --exclude='ctranslate2' logs $(cd "$WORK" && ls -d eval_* 2>/dev/null) 2>/dev/null \
    && mv "$OUT/.logs.tgz" "$OUT/logs.tgz"
}
trap pack EXIT

setup() {
  stage_begin setup
  {
    date -u; nvidia-smi 2>&1 | head -20
    "$PY" -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-')"
    "$PY" -m pip list 2>/dev/null | grep -i -E '^(torch|onnx|onnxruntime|ctranslate2|fairseq-fixed|sacrebleu|sentencepiece|numpy|pytest|pytest-xdist|hypothesis) '
    echo "cores $(nproc)"; free -g | head -2; df -h /tmp | tail -1
  } > "$LOGS/env.txt" 2>&1
  note "# GPU session $(date -u +%FT%TZ): $*"
  note ""
  note "$(grep -m1 '^torch' "$LOGS/env.txt"); $(grep -m1 '^cores' "$LOGS/env.txt")"
  if [[ $TINY != 1 ]] && ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    note "no CUDA device: stopping (logs.tgz: logs/env.txt)"; exit 3
  fi
  # Data: the held-out splits as carried, the train split unpacked (kept on a warm machine).
  mkdir -p "$WORK/data/bin"
  cp "$KIT"/heldout/*.txt "$KIT"/heldout/*.bin "$KIT"/heldout/*.idx "$WORK/data/bin/"
  [[ -f $WORK/data/bin/train.de-en.en.idx || ! -f $KIT/train.tar.xz ]] || "$PY" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$KIT/train.tar.xz" "$WORK/data/bin"
  DATA=$WORK/data/bin
  if [[ $TRAIN_SENTENCES != 0 && -f $DATA/train.de-en.en.idx ]]; then
    rm -rf "$WORK/data/small"
    "$PY" benchmarks/gpu/subset_bin.py "$DATA" "$WORK/data/small" --split train="$TRAIN_SENTENCES" \
      --split valid=40 --link test > "$LOGS/subset_small.txt" 2>&1
    DATA=$WORK/data/small
  fi
  "$PY" benchmarks/gpu/shims.py > "$LOGS/shims.txt" 2>&1 || note "console-script shims failed: $(tail -n 1 "$LOGS/shims.txt")"
  # CTranslate2 on this device: as installed, else with libcublas.so.12 linked to the machine's cuBLAS.
  local probe=(benchmarks/gpu/ct2_probe.py --checkpoint "$MODEL/model.pt" --data "$DATA" --out "$WORK/ct2probe" --device "$DEVICE")
  local shim=$WORK/cu12shim
  if "$PY" "${probe[@]}" --json "$LOGS/ct2_probe.json" > "$LOGS/ct2_probe.txt" 2>&1; then
    CT2_FLAG=--ct2; note "CTranslate2 on $DEVICE: works as installed"
  elif [[ $DEVICE == cuda ]] && "$PY" benchmarks/gpu/ct2_probe.py --shim "$shim" > "$LOGS/ct2_shim.txt" 2>&1 \
       && LD_LIBRARY_PATH=$shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$PY" "${probe[@]}" \
            --json "$LOGS/ct2_probe_shim.json" > "$LOGS/ct2_probe_shim.txt" 2>&1; then
    export LD_LIBRARY_PATH=$shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    CT2_FLAG=--ct2; note "CTranslate2 on cuda: works with $(grep -o '"target": "[^"]*"' "$LOGS/ct2_shim.txt") as libcublas.so.12"
  else
    note "CTranslate2 on $DEVICE: FAILS, so the evaluations run without --ct2 (logs.tgz: logs/ct2_*)"
  fi
  note ""
  note "| stage | exit | seconds | ends at s | |"
  note "|---|---|---:|---:|---|"
  stage_end setup 0 "data: $(ls "$DATA" | wc -l) files; ${CT2_FLAG:-no --ct2}"
}

tests_start() {  # arg: seconds kept for later stages. The CUDA tests first, then the rest; in the background
  local xdist=() budget=$(( $(left) - $1 ))
  "$PY" -c "import xdist" 2>/dev/null && xdist=(-n "$TEST_WORKERS" --dist loadfile)
  stage_begin tests
  (
    # SIGINT at the budget: pytest stops and still writes its summary and junit.
    export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
    end=$((SECONDS + budget))
    timeout -s INT -k 30 "$budget" "$PY" -m pytest $TEST_ARGS -m gpu ${xdist:+-n 4 --dist load} -q -rfEs \
      --durations=20 -p no:cacheprovider --junitxml="$LOGS/junit_gpu.xml" > "$LOGS/pytest_gpu.log" 2>&1
    echo "gpu-marked: exit $?;" > "$LOGS/pytest_rc.txt"
    timeout -s INT -k 30 $((end - SECONDS)) "$PY" -m pytest $TEST_ARGS -m "not gpu" "${xdist[@]}" -q -rfEs \
      --durations=30 -p no:cacheprovider --junitxml="$LOGS/junit.xml" > "$LOGS/pytest.log" 2>&1
    rc=$?
    echo "the others: exit $rc (124/130: stopped at the budget);" >> "$LOGS/pytest_rc.txt"
    exit $rc
  ) &
  TESTS_PID=$!
}
tests_wait() {
  wait "$TESTS_PID"; local rc=$? last
  last=$(for f in pytest_gpu pytest; do grep -E '(passed|failed|error|skipped|deselected).* in [0-9.]+s' "$LOGS/$f.log" 2>/dev/null | tail -n 1; done | tr '\n' ' ')
  stage_end tests "$rc" "$(tr '\n' ' ' < "$LOGS/pytest_rc.txt" 2>/dev/null) $last"
  for f in junit_gpu junit; do
    "$PY" benchmarks/gpu/report.py junit "$LOGS/$f.xml" >> "$SUMMARY" 2>&1 || note "(no $f.xml: see logs/pytest*.log)"
  done
  note ""
}

evaluate() {  # name checkpoint sentences "batches" keep_s: keep_s seconds stay for later stages
  local name=$1 ckpt=$2 n=$3 batches=$4 keep=$5
  local budget=$(( $(left) - 5 - keep ))
  if (( budget < 20 )); then note "| eval $name | skipped | | | $budget s were left for it |"; return; fi
  stage_begin "eval $name"
  timeout -k 10 "$budget" "$PY" -c "import sys; from nmt_specdec.evaluation.cli import main; sys.argv[0] = 'nmt-specdec-evaluate'; sys.exit(main())" \
    --checkpoint "$ckpt" --data "$DATA" --split test --spm-model "$MODEL/spm.model" \
    --first-sentences "$n" --batch-sizes $batches --repeats "$REPEATS" --beams 1 $GRID \
    --fp16 $CT2_FLAG --max-len-a 1.2 --max-len-b 10 --no-progress --out "$WORK/eval_$name" \
    > "$LOGS/eval_$name.log" 2>&1
  local rc=$?
  # Two files each while 8 fit with summary.md and logs.tgz (logs.tgz holds every one anyway).
  if [[ -f $WORK/eval_$name/results.json ]] && (( $(ls "$OUT" | grep -v -c '^summary.md$\|^logs.tgz$') + 2 <= 6 )); then
    cp "$WORK/eval_$name/results.json" "$OUT/gpu_$name.json"
    cp "$WORK/eval_$name/bleu_vs_speedup.png" "$OUT/gpu_$name.png" 2>/dev/null
  fi
  stage_end "eval $name" $rc "$n sentences, batch $batches, $REPEATS repeat(s)$([[ $rc == 124 ]] && echo '; STOPPED at its time budget')"
  [[ -f $WORK/eval_$name/results.md ]] && { note ""; note "eval $name:"; note ""; sed -n '/^| batch/,/^$/p' "$WORK/eval_$name/results.md" >> "$SUMMARY"; }
  pack
}

train_base() {  # arg: seconds kept for later stages (the training stops at TRAIN_MIN; this is a guard)
  stage_begin "train verifier"
  rm -rf "$WORK/verifier"
  local extra=(--fp16)
  [[ $TINY == 1 ]] && extra=(--cpu)
  [[ $TRAIN_UPDATES != 0 ]] && extra+=(--max-update "$TRAIN_UPDATES")
  # The reference verifier's training command (its model card) in the
  # transformer_wmt_en_de shape, fp16, a GPU batch, lr/warmup for a few-minute run, saved once.
  timeout -k 20 $(( $(left) - $1 )) "$PY" -m fairseq_cli.train "$DATA" \
    --task translation --source-lang de --target-lang en \
    --arch transformer_wmt_en_de --share-all-embeddings --dropout 0.1 --weight-decay 0.0001 --clip-norm 1.0 \
    --optimizer adam --adam-betas '(0.9, 0.98)' --lr "$TRAIN_LR" --lr-scheduler inverse_sqrt \
    --warmup-updates "$TRAIN_WARMUP" --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
    --max-tokens "$TRAIN_MAX_TOKENS" --num-workers 2 --seed 1 --log-format simple --log-interval 50 \
    --save-dir "$WORK/verifier" --no-epoch-checkpoints --save-interval 1000 --no-save-optimizer-state \
    --stop-time-hours "$("$PY" -c "print(round($TRAIN_MIN / 60, 5))")" "${extra[@]}" \
    > "$LOGS/train_verifier.log" 2>&1
  local rc=$?
  if [[ $TINY == 1 && $rc == 0 ]]; then  # fairseq's --fp16 needs CUDA: save what it would save (half weights)
    "$PY" -c "
import sys, torch
path = sys.argv[1]
state = torch.load(path, map_location='cpu', weights_only=False)
state['model'] = {k: v.half() if v.is_floating_point() else v for k, v in state['model'].items()}
common = state['cfg']['common']
common['fp16'], common['cpu'] = True, False
torch.save(state, path)" "$WORK/verifier/checkpoint_last.pt" || rc=1
  fi
  stage_end "train verifier" $rc "$("$PY" benchmarks/gpu/report.py train "$LOGS/train_verifier.log")"
  [[ $rc == 0 && -f $WORK/verifier/checkpoint_last.pt ]]
}

add_head() {
  stage_begin "add draft head"
  rm -rf "$WORK/head" "$WORK/data/head"
  "$PY" benchmarks/gpu/subset_bin.py "$DATA" "$WORK/data/head" --split train="$HEAD_SENTENCES" \
    --link valid --link test > "$LOGS/subset_head.txt" 2>&1
  timeout -k 20 $(( $(left) - EVALS_S + 60 )) "$PY" -c "import sys; from nmt_specdec.workflows.add_draft_head import main; sys.argv[0] = 'nmt-specdec-add-draft-head'; sys.exit(main())" \
    --checkpoint "$WORK/verifier/checkpoint_last.pt" --data "$WORK/data/head" --out "$WORK/head" \
    --budget-minutes "$HEAD_MIN" --valid-sentences "$HEAD_VALID" $HEAD_ARGS > "$LOGS/add_draft_head.log" 2>&1
  local rc=$?
  cp "$WORK/head/report.json" "$LOGS/add_draft_head_report.json" 2>/dev/null
  cp "$WORK/head/train.log" "$LOGS/add_draft_head_train.log" 2>/dev/null
  stage_end "add draft head" $rc "$HEAD_SENTENCES train sentences distilled, $HEAD_MIN min of training; $("$PY" benchmarks/gpu/report.py head "$WORK/head/report.json" 2>/dev/null)"
  [[ $rc == 0 && -f $WORK/head/model.pt ]]
}

join_base() {  # the parts that earlier calls left in $WORK/base -> $WORK/base/model.pt, checked
  stage_begin "join base"
  local base=$WORK/base rc=0
  if [[ ! -f $base/model.pt ]]; then
    cat $(ls "$base"/part.* 2>/dev/null | sort -t. -k2 -n) 2>/dev/null | xz -dc > "$base/model.pt" 2>"$LOGS/join_base.txt" || rc=1
  fi
  "$PY" -c "
import hashlib, json, sys
manifest = json.load(open(sys.argv[1]))
digest = hashlib.sha256(open(sys.argv[2], 'rb').read()).hexdigest()
sys.exit(0 if digest == manifest['model_sha256'] else 1)" "$base/manifest.json" "$base/model.pt" \
    >> "$LOGS/join_base.txt" 2>&1 || rc=1
  stage_end "join base" $rc "$(ls "$base" 2>/dev/null | tr '\n' ' ')$([[ $rc != 0 ]] && echo '; MISSING or CORRUPT: a part did not arrive, or the machine went back')"
  [[ $rc == 0 ]]
}

export_base_verifier() {  # the joined base model's verifier, where the head stage reads one
  mkdir -p "$WORK/verifier"
  "$PY" scripts/export_verifier.py "$WORK/base/model.pt" "$WORK/verifier/checkpoint_last.pt" \
    > "$LOGS/export_verifier.txt" 2>&1 || { note "| export verifier | failed | | | logs/export_verifier.txt |"; return 1; }
}

return_head() {  # the trained head and its report to $OUT (files come back at 16 MiB at most)
  [[ -f $WORK/head/head.pt ]] || return 1
  split -b 15m -d "$WORK/head/head.pt" "$OUT/base_head.pt.part"
  cp "$WORK/head/report.json" "$OUT/base_head_report.json"
  note "head file: $(stat -c %s "$WORK/head/head.pt") bytes, sha256 $(sha256sum "$WORK/head/head.pt" | cut -c1-64), in $(ls "$OUT" | grep -c part) part(s): cat base_head.pt.part* > head.pt"
}

gpu_tests() {  # the gpu-marked tests alone, after the timings (arg: seconds kept for later)
  local budget=$(( $(left) - $1 ))
  if (( budget < 30 )); then note "| gpu tests | skipped | | | $budget s were left |"; return; fi
  stage_begin "gpu tests"
  timeout -s INT -k 20 "$budget" "$PY" -m pytest $GPU_TEST_ARGS -m gpu -q -rfEs --durations=15 \
    -p no:cacheprovider --junitxml="$LOGS/junit_gpu.xml" > "$LOGS/pytest_gpu.log" 2>&1
  local rc=$?
  stage_end "gpu tests" $rc "$(grep -E '(passed|failed|error|skipped).* in [0-9.]+s' "$LOGS/pytest_gpu.log" | tail -n 1)"
  "$PY" benchmarks/gpu/report.py junit "$LOGS/junit_gpu.xml" >> "$SUMMARY" 2>&1 || note "(no junit_gpu.xml)"
}

stages=("$@")
[[ ${#stages[@]} == 0 ]] && { echo "usage: session.sh tests|shipped|base|all|train|head|part|static|basehead ..." >&2; exit 2; }
if [[ ${stages[0]} == part ]]; then  # no setup: a short call that leaves its part behind
  : "${PART:?PART=gpu_kit/baseN}"
  mkdir -p "$WORK/base" && cp "$PART"/* "$WORK/base/" && ls -l "$WORK/base" | tee "$SUMMARY" || exit
  if [[ ${stages[1]:-} == gpu-tests ]]; then  # and the gpu-marked tests while the parts arrive
    "$PY" benchmarks/gpu/shims.py > "$LOGS/shims.txt" 2>&1 || note "console-script shims failed"
    gpu_tests 0
  fi
  exit 0
fi
: > "$SUMMARY"
if [[ " ${stages[*]} " == *" head "* && " ${stages[*]} " != *" train "* && ! -f $WORK/verifier/checkpoint_last.pt ]]; then
  note "stage head: no $WORK/verifier/checkpoint_last.pt (a fresh machine: the train call's machine went back); nothing done"
  exit 4
fi
setup "${stages[@]}"
HEAD_MODEL=$WORK/head/model.pt
for stage in "${stages[@]}"; do
  case $stage in
    tests) tests_start "$TESTS_KEEP_S"; tests_wait ;;
    shipped) evaluate shipped "$MODEL/model.pt" "$SHIPPED_SENTENCES" "$SHIPPED_BATCHES" 0 ;;
    base)
      if train_base $((EVALS_S + 60)) && add_head; then
        evaluate base_b8_32 "$HEAD_MODEL" "$BASE_BIG_SENTENCES" "$BASE_BIG_BATCHES" "$B1_S"
        evaluate base_b1 "$HEAD_MODEL" "$BASE_B1_SENTENCES" 1 0
      fi ;;
    train) train_base 10 ;;
    head)
      if add_head; then
        evaluate base_b8_32 "$HEAD_MODEL" "$BASE_BIG_SENTENCES" "$BASE_BIG_BATCHES" "$B1_S"
        evaluate base_b1 "$HEAD_MODEL" "$BASE_B1_SENTENCES" 1 0
      fi ;;
    static)
      GRID=$STATIC_GRID
      if join_base; then
        evaluate base_b1 "$WORK/base/model.pt" "$BASE_B1_SENTENCES" 1 $((STATIC_BIG_S + GPU_TESTS_S))
        evaluate base_b8_32 "$WORK/base/model.pt" "$BASE_BIG_SENTENCES" "$BASE_BIG_BATCHES" "$GPU_TESTS_S"
      fi
      [[ $STATIC_TESTS == 1 ]] && gpu_tests "$SHIPPED_S"
      evaluate shipped "$MODEL/model.pt" "$BASE_B1_SENTENCES" "1 $BASE_BIG_BATCHES" 0 ;;
    basehead)  # issue 47: a head trained onto the reference base verifier (plan H)
      join_base && export_base_verifier && add_head && return_head ;;
    all)
      tests_start "$EVALS_S"
      train_base $((EVALS_S + 60)) && add_head; trained=$?
      tests_wait
      if [[ $trained == 0 ]]; then
        evaluate base_b8_32 "$HEAD_MODEL" "$BASE_BIG_SENTENCES" "$BASE_BIG_BATCHES" $((SHIPPED_S + B1_S))
        evaluate shipped "$MODEL/model.pt" "$SHIPPED_SENTENCES" "$SHIPPED_BATCHES" "$B1_S"
        evaluate base_b1 "$HEAD_MODEL" "$BASE_B1_SENTENCES" 1 0
      else
        evaluate shipped "$MODEL/model.pt" "$SHIPPED_SENTENCES" "$SHIPPED_BATCHES" 0
      fi ;;
    *) note "unknown stage $stage" ;;
  esac
  pack
done
note ""
note "done at t=$((SECONDS - START)) s; OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
