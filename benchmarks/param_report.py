"""How many parameters the draft head adds to each SpecDec architecture.

Builds each architecture over a stand-in joint dictionary of ``--vocab-size``
symbols (shared embeddings, as the recipes train them) and prints a markdown
table: the AR model (what a stock model has), the draft head alone, and the
head as a share of the AR model.

Example (from the repository root)::

    python benchmarks/param_report.py --vocab-size 32000
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, NamedTuple, Optional

from torch import nn

ARCHS = ["specdec_transformer_wmt_en_de", "specdec_transformer_tiny"]


class ParamReport(NamedTuple):
    """Parameter counts of a SpecDec model.

    Attributes:
        verifier: encoder + AR decoder + embeddings (what a stock model has).
        draft_head: parameters owned by the draft head alone.
    """

    verifier: int
    draft_head: int

    @property
    def overhead(self) -> float:
        """Draft-head parameters as a fraction of the AR model."""
        return self.draft_head / self.verifier

    def markdown(self, name: str) -> str:
        return (
            f"| {name} | {self.verifier / 1e6:.1f}M | {self.draft_head / 1e6:.1f}M "
            f"| {100 * self.overhead:.1f}% |"
        )


def count_parameters(model: nn.Module) -> ParamReport:
    """Counts shared parameters once, attributing them to the verifier."""
    own = {id(p) for p in model.draft_head.parameters()}
    unique = {id(p): p for p in model.parameters()}
    verifier = sum(p.numel() for key, p in unique.items() if key not in own)
    draft = sum(p.numel() for key, p in unique.items() if key in own)
    return ParamReport(verifier, draft)


def build(arch: str, data_dir: str) -> nn.Module:
    """``arch`` over the dictionaries in ``data_dir``, randomly initialised."""
    import fairseq_plugins  # noqa: F401  (registers the task and architectures)
    from fairseq import options, tasks

    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [data_dir, "--task", "translation_specdec", "--arch", arch, "-s", "de", "-t", "en",
         "--share-all-embeddings"],
    )
    return tasks.setup_task(args).build_model(args)


def run(vocab_size: int, workdir: str) -> str:
    """Returns a markdown table of verifier vs draft-head parameters."""
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    for i in range(vocab_size):
        dictionary.add_symbol(f"tok{i}")
    os.makedirs(workdir, exist_ok=True)
    for lang in ("de", "en"):
        dictionary.save(os.path.join(workdir, f"dict.{lang}.txt"))
    rows = ["| architecture | AR model (verifier) | draft head | overhead |",
            "|---|---|---|---|"]
    rows += [count_parameters(build(arch, workdir)).markdown(arch) for arch in ARCHS]
    return "\n".join(rows)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=32000,
                        help="joint vocabulary size (WMT14 recipe: 32000)")
    parser.add_argument("--workdir", default="work/param_report",
                        help="where the stand-in dictionary is written")
    cfg = parser.parse_args(argv)
    print(run(cfg.vocab_size, cfg.workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
