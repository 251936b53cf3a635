#!/usr/bin/env python
"""Write a shippable model directory from a trained SpecDec checkpoint.

Example (from the repository root)::

    python scripts/ship_model.py --checkpoint work/head/model.pt \\
        --dictionaries VERIFIER_DIR --k 4 --corpus gettext --out models/my-de-en

Writes ``model.pt`` (float16 weights, no training state, portable config),
copies ``dict.*.txt`` and ``spm.model`` from ``--dictionaries`` (the directory
of the stock verifier the head was trained on), and writes
``settings.json`` (the decoding settings the quickstart uses, and the sha256 of
every file). The model card (``README.md``) is written by hand from the
measured figures.

A verifier shipped with its head apart (the Transformer-base model)::

    python scripts/ship_model.py --checkpoint ../shared/models/gettext-base/model.pt \
        --verifier-only --draft-head HEAD.pt --shard-mb 45 --dictionaries \
        ../shared/models/gettext-base --k 2 --corpus gettext \
        --heldout-from models/gettext-de-en-tiny/settings.json --out models/gettext-de-en-base

``--verifier-only`` writes the stock fairseq ``transformer`` inside the
checkpoint (plain ``fairseq-generate`` loads it), ``--draft-head`` ships a head
file beside it as ``head.pt``, and ``--shard-mb`` ships ``model.pt`` as shards
with an index (:mod:`nmt_specdec.model_shards`; the joined ``model.pt`` is
left in place, for git to ignore).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from nmt_specdec.checkpoint_safety import load_checkpoint
from nmt_specdec.export import verifier_state
from nmt_specdec.hashing import file_sha256 as sha256
from nmt_specdec.model_shards import index_path, split
from nmt_specdec.shipping import save_compact


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--dictionaries", type=Path, required=True,
                   help="directory with dict.SRC.txt, dict.TGT.txt and spm.model")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--k", type=int, required=True, help="default draft block size")
    p.add_argument("--candidates", type=int, default=1,
                   help="drafts per slot the quickstart also measures (--spec-candidates)")
    p.add_argument("--refine-steps", type=int, default=None,
                   help="runs of the head's refinement pass stored in the checkpoint "
                   "(default: as trained)")
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)
    p.add_argument("--corpus", choices=("ding", "gettext"), required=True,
                   help="the corpus recipe whose test split the quickstart decodes")
    p.add_argument("--heldout-from", type=Path,
                   help="gettext: the recipe's DATA_CARD.md (or a shipped model's "
                   "settings.json); its valid/test packages go to settings.json so the "
                   "quickstart fetches only those")
    p.add_argument("--verifier-only", action="store_true",
                   help="write the verifier alone, as a stock fairseq transformer")
    p.add_argument("--draft-head", type=Path, default=None,
                   help="a head file shipped beside the verifier as head.pt")
    p.add_argument("--shard-mb", type=int, default=None,
                   help="ship model.pt as shards of at most this many MB, with an index")
    p.add_argument("--summary", default="",
                   help="one or two sentences on the model for the quickstart report")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    state = load_checkpoint(str(args.checkpoint))
    if args.refine_steps is not None:
        set_refine_steps(state, args.refine_steps)
    if args.verifier_only:
        state = verifier_state(state, require_draft_head=False)
    save_compact(state, args.out / "model.pt")
    for path in sorted(args.dictionaries.glob("dict.*.txt")) + [args.dictionaries / "spm.model"]:
        shutil.copyfile(path, args.out / path.name)
    if args.draft_head is not None:
        shutil.copyfile(args.draft_head, args.out / "head.pt")
    shipped_whole = {"README.md", "settings.json"}
    if args.shard_mb is not None:
        split(args.out / "model.pt", args.shard_mb * 10**6)
        shipped_whole.add("model.pt")  # its sha256 is in the index
    files = sorted(p.name for p in args.out.iterdir()
                   if p.name not in shipped_whole and not p.name.startswith("."))
    settings = {"k": args.k, "candidates": args.candidates,
                "max_len_a": args.max_len_a, "max_len_b": args.max_len_b,
                "corpus": args.corpus, "summary": args.summary,
                **({"draft_head": "head.pt"} if args.draft_head else {}),
                **({"sharded": index_path(Path("model.pt")).name} if args.shard_mb else {}),
                "sha256": {name: sha256(args.out / name) for name in files},
                "bytes": {name: (args.out / name).stat().st_size for name in files}}
    if args.heldout_from is not None:
        settings["gettext_heldout"] = heldout_packages(args.heldout_from)
    previous = args.out / "settings.json"
    if previous.is_file():  # the quickstart's plan is written by hand: kept
        plan = json.loads(previous.read_text(encoding="utf-8")).get("quickstart")
        settings.update({"quickstart": plan} if plan else {})
    (args.out / "settings.json").write_text(json.dumps(settings, indent=1) + "\n")
    for name in files:
        print(f"| {name} | {settings['bytes'][name]} | `{settings['sha256'][name]}` |")
    return 0


def set_refine_steps(state: dict, steps: int) -> None:
    """Stores ``steps`` as the checkpoint's ``--draft-refine-steps``."""
    model_cfg = (state.get("cfg") or {}).get("model")
    if not getattr(model_cfg, "draft_refine_layers", None) and not (
            isinstance(model_cfg, dict) and model_cfg.get("draft_refine_layers")):
        raise SystemExit("error: --refine-steps: this head has no refinement layers")
    if steps < 1:
        raise SystemExit("error: --refine-steps must be >= 1")
    if isinstance(model_cfg, dict):
        model_cfg["draft_refine_steps"] = steps
    else:
        model_cfg.draft_refine_steps = steps


def heldout_packages(data_card: Path) -> dict:
    """{"valid": [...], "test": [...]} from the package table of a gettext data card,
    or from a shipped model's settings.json."""
    if data_card.suffix == ".json":
        return json.loads(data_card.read_text(encoding="utf-8"))["gettext_heldout"]
    heldout: dict = {"valid": [], "test": []}
    for line in data_card.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        # | package | version | licence | split | pairs | catalogs |
        if len(cells) == 6 and cells[3] in heldout and cells[4].isdigit():
            heldout[cells[3]].append(cells[0])
    if not heldout["test"]:
        raise SystemExit(f"error: {data_card} lists no test package")
    return heldout


if __name__ == "__main__":
    sys.exit(main())
