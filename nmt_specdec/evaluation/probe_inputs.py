"""What the head and loop probes share: a checkpoint and a raw test set on the
command line, loaded as the model, its task, the encoded sources and fairseq's
length rules (``scripts/simulate_draft_trees.py``, ``scripts/probe_loop_graphs.py``)."""

from __future__ import annotations

import argparse
from typing import List, NamedTuple

from torch import Tensor, nn

from nmt_specdec.decoding.options import LengthRules
from nmt_specdec.errors import UserError


class TestSet(NamedTuple):
    model: nn.Module
    task: object
    sources: List[Tensor]
    rules: LengthRules


def add_test_set_args(p: argparse.ArgumentParser, max_sentences: int = 500) -> None:
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", required=True, help="directory with the dictionaries")
    p.add_argument("--src-file", required=True, help="raw source sentences, one per line")
    p.add_argument("--spm-model", required=True)
    p.add_argument("--max-sentences", type=int, default=max_sentences)
    p.add_argument("--max-len-a", type=float, default=1.2)
    p.add_argument("--max-len-b", type=int, default=10)


def load_test_set(args: argparse.Namespace) -> TestSet:
    """The model (fp32, eval mode; it must have a draft head), its task, the first
    ``--max-sentences`` sources encoded, and the length rules."""
    import sentencepiece
    from fairseq import checkpoint_utils

    try:
        with open(args.src_file, encoding="utf-8") as handle:
            lines = handle.read().splitlines()[: args.max_sentences]
    except OSError as err:
        raise UserError(f"cannot read --src-file {args.src_file}: {err.strerror}") from None
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [args.checkpoint], arg_overrides={"data": args.data})
    model = models[0].float().eval()
    if not hasattr(model, "draft_head"):
        raise UserError(f"{args.checkpoint} has no draft head")
    spm = sentencepiece.SentencePieceProcessor(model_file=args.spm_model)
    sources = [task.source_dictionary.encode_line(" ".join(spm.encode(line, out_type=str)),
                                                  add_if_not_exist=False).long()
               for line in lines]
    rules = LengthRules(max_len_a=args.max_len_a, max_len_b=args.max_len_b,
                        max_positions=model.max_decoder_positions())
    return TestSet(model, task, sources, rules)
