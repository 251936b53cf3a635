#!/usr/bin/env python
"""Writes the verifier of a SpecDec checkpoint as a stock fairseq transformer checkpoint.

Example: python scripts/export_verifier.py checkpoints/x/checkpoint_best.pt verifier.pt
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from fairseq import checkpoint_utils

import fairseq_plugins  # noqa: F401  (safe checkpoint loading)
from nmt_specdec.errors import UserError
from nmt_specdec.export import verifier_state


def run(checkpoint: str, output: str) -> None:
    if not os.path.isfile(checkpoint):
        raise UserError(f"no such checkpoint: {checkpoint}")
    state = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)
    torch.save(verifier_state(state), output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="SpecDec checkpoint (specdec_transformer*)")
    parser.add_argument("output", help="where to write the stock transformer checkpoint")
    cfg = parser.parse_args()
    try:
        run(cfg.checkpoint, cfg.output)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {cfg.output}")


if __name__ == "__main__":
    main()
