#!/usr/bin/env bash
# CPU rehearsal of the GPU session's calls (benchmarks/gpu/README.md), so that a device minute is
# never spent on a typo. It rebuilds what the device tool does, as closely as a CPU machine can:
#   - a copy of what travels (tracked files present, untracked files git does not ignore, the
#     carry paths) in $EMU/tree, nothing else: a file the calls need but do not carry fails here;
#   - a "bare" Python ($EMU_PY: a venv with what the GPU image has -- torch, onnxruntime, onnx,
#     sacrebleu, sentencepiece, matplotlib, pytest, pytest-xdist... -- and NOT fairseq, hydra,
#     omegaconf, ctranslate2), first on PATH as python3;
#   - .whl replaced by the same wheels for this machine's Python (cp311), slimmed the same way;
#   - each README call's command string, as written there, with TINY=1 (a few updates and
#     sentences, --cpu, a test selection) and /tmp/site moved to $EMU/site.
# Usage, from the repository root after benchmarks/gpu/prepare.sh:
#   bash benchmarks/gpu/tiny_check.sh [CALL...]     (default: every call named in the README)
# TREE=head rehearses on the last commit's files (plus the working tree's benchmarks/gpu/) instead
# of the working tree as it is: for when others are half-way through an edit of the package.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
ROOT=$PWD
EMU=${EMU:-/tmp/gpu_emu}
EMU_VENV=${EMU_VENV:-/tmp/emu311}
WHL=${WHL:-$EMU/whl311}
README=benchmarks/gpu/README.md

# 1. The bare interpreter (once).
if [[ ! -x $EMU_VENV/bin/python3 ]]; then
  python3.11 -m venv "$EMU_VENV" 2>/dev/null || "$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.11*/bin/python3.11 | head -n1)" -m venv "$EMU_VENV"
  "$EMU_VENV/bin/pip" install -q torch torchaudio onnxruntime onnx 'onnx-ir==1.0.0' sacrebleu sentencepiece \
    tqdm matplotlib numpy pyyaml pytest pytest-xdist pytest-timeout hypothesis regex cython cffi packaging scikit-learn
fi
PYV=$("$EMU_VENV/bin/python3" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')

# 2. The carried wheels, for this interpreter (once): same packages as .whl, same slimming.
if ! compgen -G "$WHL/ctranslate2-*.whl" >/dev/null; then
  mkdir -p "$WHL"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHL" hydra-core==1.3.2 omegaconf==2.3.0 bitarray onnx_ir ctranslate2
  "$EMU_VENV/bin/pip" wheel -q --no-deps -w "$WHL" antlr4-python3-runtime==4.9.3 fairseq-fixed==0.12.3.1
  "$EMU_VENV/bin/python3" benchmarks/gpu/slim_wheels.py "$WHL" --lzma
fi

# 3. What travels, and nothing else.
rm -rf "$EMU/tree" "$EMU/site" && mkdir -p "$EMU/tree"
if [[ ${TREE:-worktree} == head ]]; then
  git archive HEAD | tar -x -C "$EMU/tree"
  cp -r benchmarks/gpu "$EMU/tree/benchmarks/"
else
  git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null \
    | tar -x -C "$EMU/tree"
fi
echo "tree: $(du -sh "$EMU/tree" | cut -f1) (before the carried paths)"
carry_into_tree() {  # the call's carry list, as the device tool carries it (.whl: the cp$PYV wheels)
  local path
  for path in $(echo "$1" | tr -d '[]",'); do
    rm -rf "${EMU:?}/tree/$path" && mkdir -p "$EMU/tree/$(dirname "$path")"
    if [[ $path == .whl ]]; then cp -r "$WHL" "$EMU/tree/.whl"; else cp -r "$path" "$EMU/tree/$path"; fi
  done
}

calls=("$@")
[[ ${#calls[@]} == 0 ]] && mapfile -t calls < <(sed -n 's/^call \([a-z0-9_-]*\)$/\1/p' "$README")
status=0
for call in "${calls[@]}"; do
  cmd=$(awk -v c="call $call" '$0 == c {f = 1} f && /^command: / {sub(/^command: /, ""); print; exit}' "$README")
  [[ -n $cmd ]] || { echo "no call '$call' in $README" >&2; exit 2; }
  (( ${#cmd} <= 2000 )) || { echo "call $call: command is ${#cmd} characters (limit 2000)" >&2; status=1; }
  carry=$(awk -v c="call $call" '$0 == c {f = 1} f && /^carry: / {sub(/^carry: /, ""); print; exit}' "$README")
  echo "== call $call (${#cmd} characters; carry $carry): $cmd"
  carry_into_tree "$carry"
  rm -rf "$EMU/out" && mkdir -p "$EMU/out"
  # A fresh machine, except for a call that follows another on the same warm machine.
  case $call in head|base2|static|hbase3|basehead|headon) ;; *) rm -rf "$EMU/site" "$EMU/work" ;; esac
  start=$SECONDS
  set +e
  (cd "$EMU/tree" && PATH=$EMU_VENV/bin:$PATH OUT=$EMU/out TINY=1 WORK=$EMU/work TINY_DEADLINE_S=${TINY_DEADLINE_S:-1800} \
    bash -c "${cmd//\/tmp\/site/$EMU/site}") > "$EMU/call_$call.log" 2>&1
  rc=$?
  set -e
  echo "   exit $rc after $((SECONDS - start)) s; log $EMU/call_$call.log"
  files=$(cd "$EMU/out" && find . -type f | sort)
  count=$(echo "$files" | grep -c . || true)
  echo "   OUT: $count file(s): $(echo $files)"
  (( count <= 8 )) || { echo "   more than 8 files come back from OUT" >&2; status=1; }
  if echo "$files" | grep -q '[^A-Za-z0-9._/-]'; then echo "   odd file names in OUT" >&2; status=1; fi
  [[ -f $EMU/out/summary.md ]] && sed 's/^/   | /' "$EMU/out/summary.md" | head -120
  [[ $rc == 0 ]] || status=1
  grep -q ' rc [1-9]' "$EMU/out/summary.md" 2>/dev/null && { echo "   a stage failed (summary)" >&2; status=1; }
done
exit $status
