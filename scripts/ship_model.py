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
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from nmt_specdec.checkpoint_safety import load_checkpoint
from nmt_specdec.hashing import file_sha256 as sha256
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
                   help="gettext: the recipe's DATA_CARD.md; its valid/test packages go to "
                   "settings.json so the quickstart fetches only those")
    p.add_argument("--summary", default="",
                   help="one or two sentences on the model for the quickstart report")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    state = load_checkpoint(str(args.checkpoint))
    if args.refine_steps is not None:
        set_refine_steps(state, args.refine_steps)
    save_compact(state, args.out / "model.pt")
    for path in sorted(args.dictionaries.glob("dict.*.txt")) + [args.dictionaries / "spm.model"]:
        shutil.copyfile(path, args.out / path.name)
    files = sorted(p.name for p in args.out.iterdir()
                   if p.name not in ("README.md", "settings.json"))
    settings = {"k": args.k, "candidates": args.candidates,
                "max_len_a": args.max_len_a, "max_len_b": args.max_len_b,
                "corpus": args.corpus, "summary": args.summary,
                "sha256": {name: sha256(args.out / name) for name in files},
                "bytes": {name: (args.out / name).stat().st_size for name in files}}
    if args.heldout_from is not None:
        settings["gettext_heldout"] = heldout_packages(args.heldout_from)
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
    """{"valid": [...], "test": [...]} from the package table of a gettext data card."""
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
