#!/usr/bin/env bash
# Prepare, on this (CPU) machine, what the GPU session carries (benchmarks/gpu/README.md):
#   .whl/              the wheels the GPU machine lacks ($WHEELS_SH --ct2: the workplace's
#                      wheel script for the device machine), slimmed
#                      by slim_wheels.py --lzma (64 MB -> ~18 MB)
#   gpu_kit/gettext/   the project's gettext recipe (nmt-specdec-prepare-gettext), encoded and
#                      binarized with the shipped model's spm.model and dictionaries, held-out
#                      packages fixed to the shipped model's (stays here: ~125 MB with catalogs)
#   gpu_kit/carry/     what travels: heldout/ (dictionaries, valid and test, binarized) and
#                      train.tar.xz (the whole binarized train split, ~6.7 MB)
#   gpu_kit/base1..3/  the reference base model in parts, one per call of plan S (base_parts.py)
# Both folders are ignored through .git/info/exclude (never commit data). Every step is
# skipped when its output exists; FORCE=1 redoes the packing. Run from the repository root:
#   WHEELS_SH=path/to/wheels.sh bash benchmarks/gpu/prepare.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PY=${PY:-.venv/bin/python}
[[ -x $PY ]] || PY=python3
KIT=gpu_kit
exclude=.git/info/exclude
for pattern in /.whl/ /gpu_kit/; do
  grep -qx "$pattern" "$exclude" 2>/dev/null || echo "$pattern" >> "$exclude"
done

# 1. Wheels (cp312, the GPU machine's Python), slimmed; each slim wheel carries a marker.
if ! compgen -G ".whl/ctranslate2-*.whl" >/dev/null || ! unzip -l .whl/fairseq_fixed-*.whl | grep -q '\.slim$'; then
  [[ -n ${WHEELS_SH:-} ]] || { echo "set WHEELS_SH to the device machine's wheel script" >&2; exit 2; }
  bash "$WHEELS_SH" --ct2
fi
"$PY" benchmarks/gpu/slim_wheels.py .whl --lzma

# 2. The gettext corpus with the shipped model's vocabulary (reused when done: ~3 min).
MODEL=models/gettext-de-en-tiny
if [[ ! -f $KIT/gettext/bin/train.de-en.en.bin ]]; then
  PATH=$(dirname "$PY"):$PATH nmt-specdec-prepare-gettext --out $KIT/gettext --model-dir $MODEL \
    --heldout-from $MODEL/settings.json
fi
for f in dict.de.txt dict.en.txt; do
  cmp -s $KIT/gettext/bin/$f $MODEL/$f || { echo "$KIT/gettext/bin/$f differs from $MODEL/$f" >&2; exit 1; }
done

# 3. Pack what travels.
carry=$KIT/carry
if [[ ${FORCE:-0} == 1 || ! -f $carry/train.tar.xz ]]; then
  rm -rf "$carry" && mkdir -p "$carry/heldout"
  cp $KIT/gettext/bin/dict.*.txt $KIT/gettext/bin/{valid,test}.de-en.*.{bin,idx} "$carry/heldout/"
  grep -m1 '^- \*\*Command' $KIT/gettext/DATA_CARD.md > "$carry/heldout/COMMAND.txt" || true
  tar -C $KIT/gettext/bin -cf - $(cd $KIT/gettext/bin && ls train.de-en.*.{bin,idx}) | xz -9e -T2 > "$carry/train.tar.xz"
fi
du -b "$carry"/train.tar.xz "$carry"/heldout .whl | awk '{printf "%8.2f MiB  %s\n", $1 / 1048576, $2}'
sed -n '/^| split/,/^$/p' $KIT/gettext/DATA_CARD.md

# 4. The reference base model in three parts, one per call of plan S (reused when up to date).
BASE=${BASE:-../shared/models/gettext-base/model.pt}
[[ -f $BASE ]] && "$PY" benchmarks/gpu/base_parts.py "$BASE" --out $KIT

# 5. What each call would send now (others' untracked files count too: rerun before a call).
echo "== plans A-C"
"$PY" benchmarks/gpu/budget.py --carry .whl $carry || true
echo "== plan S: base1, base2, static"
"$PY" benchmarks/gpu/budget.py --carry .whl $KIT/base1 || true
"$PY" benchmarks/gpu/budget.py --carry $KIT/base2 || true
"$PY" benchmarks/gpu/budget.py --carry $carry/heldout $KIT/base3 || true
