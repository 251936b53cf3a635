#!/usr/bin/env bash
# The second GPU call (benchmarks/gpu/README.md, "After the first call"): what the first
# call found broken, checked again on the fixed tree in about four minutes.
#   1. the CUDA tests and the tests that failed on the GPU machine (in the background);
#   2. benchmarks/gpu/attention_kernels.py beside them (its ratios are large);
#   3. then, alone on the machine, nmt-specdec-evaluate on the shipped model, fp32 and
#      --fp16, batch 1 and 32, with CTranslate2.
# Runs after the README's pip prefix, from the repository root; writes into $OUT.
set -uo pipefail
: "${OUT:?OUT must be set (the device tool sets it)}"
W=${WORK:-/tmp/recheck}
if [[ ${TINY:-0} == 1 ]]; then  # the CPU rehearsal (tiny_check.sh): a few sentences, --cpu
  : "${SENTENCES:=4}" "${DEVICE_ARGS:=--cpu}" "${PROBE_ARGS:=--device cpu --sentences 2 --repeats 1}"
  : "${TESTS:=tests/unit/test_device.py tests/integration/test_cuda.py}"
fi
TESTS_S=${TESTS_S:-150} EVAL_S=${EVAL_S:-90} SENTENCES=${SENTENCES:-64}
DEVICE_ARGS=${DEVICE_ARGS:-}
mkdir -p "$W"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
python3 benchmarks/gpu/ct2_probe.py --shim "$W/cu12" > "$OUT/setup.txt" 2>&1
export LD_LIBRARY_PATH=$W/cu12${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
python3 benchmarks/gpu/shims.py >> "$OUT/setup.txt" 2>&1

TESTS=${TESTS:-tests/integration/test_cuda.py tests/integration/test_evaluation_cuda.py
  tests/unit/test_device.py tests/integration/test_command_logging.py
  tests/unit/test_quantize_rows.py tests/integration/test_evaluate_precision.py
  tests/integration/test_half_precision.py::test_translate_command_in_half_precision
  tests/integration/test_onnx_backend.py::test_evaluate_runs_backends_and_ctranslate2_rows
  tests/integration/test_evaluate_speed.py::test_stock_checkpoint_drafts_with_its_8bit_copy}
(
  export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
  timeout -s INT -k 10 "$TESTS_S" python3 -m pytest $TESTS -n 8 --dist load -q -rfEs \
    --durations=15 -p no:cacheprovider > "$OUT/pytest.log" 2>&1
  echo "pytest exit $?" >> "$OUT/pytest.log"
) &
tests=$!
OMP_NUM_THREADS=1 timeout -k 10 "$TESTS_S" python3 benchmarks/gpu/attention_kernels.py \
  --repeats 2 ${PROBE_ARGS:-} > "$OUT/attention_kernels.md" 2> "$W/attention_kernels.err"
echo "exit $?" >> "$OUT/attention_kernels.md"
tail -n 5 "$W/attention_kernels.err" >> "$OUT/attention_kernels.md"
wait "$tests"

timeout -k 10 "$EVAL_S" python3 -c "import sys; from nmt_specdec.evaluation.cli import main; sys.argv[0] = 'nmt-specdec-evaluate'; sys.exit(main())" \
  --checkpoint models/gettext-de-en-tiny/model.pt --data gpu_kit/carry/heldout --split test \
  --spm-model models/gettext-de-en-tiny/spm.model --first-sentences "$SENTENCES" \
  --batch-sizes 1 32 --repeats 1 --beams 1 --grid-k 2 4 --grid-auto --grid-beta 1 --fp16 \
  --ct2 --max-len-a 1.2 --max-len-b 10 --no-progress --out "$W/eval" $DEVICE_ARGS \
  > "$OUT/eval.log" 2>&1
echo "evaluate exit $?" >> "$OUT/eval.log"
cp "$W/eval/results.json" "$OUT/gpu_shipped_recheck.json" 2>/dev/null
cp "$W/eval/bleu_vs_speedup.png" "$OUT/gpu_shipped_recheck.png" 2>/dev/null
ls "$OUT"
