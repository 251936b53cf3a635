#!/usr/bin/env bash
# The device tool sends every tracked file of the working tree (at most 64 MiB a call), and the
# shipped base model (models/gettext-de-en-base: five 19.1 MiB shards and a 16.6 MiB head) is
# tracked. Before device calls, park its large files in gpu_kit/parked/ (ignored: it travels only
# where a call's carry names a file of it); after them, restore them.
#
#   bash benchmarks/gpu/park_base_model.sh park      # before the calls
#   bash benchmarks/gpu/park_base_model.sh restore   # after them (git status is clean again)
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=models/gettext-de-en-base
PARKED=gpu_kit/parked
grep -qx '/gpu_kit/' .git/info/exclude 2>/dev/null || echo /gpu_kit/ >> .git/info/exclude
case "${1:-}" in
  park)
    mkdir -p "$PARKED"
    for file in "$MODEL"/model.pt-* "$MODEL"/head.pt "$MODEL"/model.pt; do
      [[ -e $file ]] && mv "$file" "$PARKED/"
    done
    echo "parked in $PARKED: $(ls "$PARKED" | tr '\n' ' ')" ;;
  restore)
    for file in "$PARKED"/*; do
      [[ -e $file ]] && mv "$file" "$MODEL/"
    done
    git checkout -- "$MODEL"   # anything still missing comes back from git
    echo "restored $MODEL" ;;
  *) echo "usage: $0 park|restore" >&2; exit 2 ;;
esac
