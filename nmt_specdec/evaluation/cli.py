"""``nmt-specdec-evaluate``: BLEU versus speedup of SpecDec and fairseq's generator.

Loads one checkpoint and decodes one test set (a binarized split, or raw text
with ``--src-file``) with fairseq's SequenceGenerator at each of ``--beams``,
this project's greedy and SpecDec at each setting of the ``--grid-*`` flags on
each ``--backend``, and with ``--ct2`` CTranslate2's fp32 and int8 greedy, in
``--repeats`` interleaved timed passes at each of ``--batch-sizes``. Writes
``results.json``, ``results.md`` and ``bleu_vs_speedup.png`` to ``--out`` and
prints the table; progress bars by default, the libraries' INFO logs with ``-v``.

Example::

    nmt-specdec-evaluate --checkpoint ckpt/checkpoint_best.pt --data data-bin \\
        --split test --spm-model spm.model --ref-file raw/test.en \\
        --batch-sizes 1 32 --grid-k 10 --grid-beta 1 3 5 --grid-tau 1 3 --out eval/
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from typing import List, Optional

from nmt_specdec import checkpoints
from nmt_specdec import logs
from nmt_specdec.decoding.backends import BACKENDS, DEFAULT_BACKEND
from nmt_specdec.arguments import HelpFormatter, add_deprecated_alias
from nmt_specdec.decoding.options import DRAFTERS, option_flag, option_help
from nmt_specdec.errors import UserError
from nmt_specdec.evaluation.config import EvalConfig


def build_parser() -> argparse.ArgumentParser:
    # The pipeline and the report import fairseq, which logs while it is imported:
    # main() sets logging up first, so they are imported in functions, not here.
    from nmt_specdec.evaluation.pipeline import PLOT_PNG, RESULTS_JSON, RESULTS_MD

    parser = argparse.ArgumentParser(
        prog="nmt-specdec-evaluate", formatter_class=HelpFormatter,
        description="Decode one test set with fairseq's SequenceGenerator (beam 1, "
        "beam N) and a grid of SpecDec settings, interleaved in one process on one "
        f"loaded checkpoint; write {RESULTS_JSON}, {RESULTS_MD} and {PLOT_PNG}.",
    )
    _add_input_args(parser.add_argument_group("model and test set"))
    _add_decoding_args(
        parser.add_argument_group("decoding (fairseq-generate's meaning)")
    )
    _add_timing_args(parser.add_argument_group("timing"))
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument(
        "--user-dir",
        default=None,
        metavar="DIR",
        help="fairseq plugin to register before loading (default: this "
        "project's fairseq_plugins)",
    )
    logs.add_verbose_flag(parser)
    return parser


def _add_input_args(group) -> None:
    group.add_argument(
        "--checkpoint", required=True, metavar="PT", help="fairseq checkpoint"
    )
    group.add_argument(
        "--data",
        metavar="DIR",
        help="fairseq binarized data dir: the test split and the "
        "dictionaries (default dictionaries: the checkpoint's dir)",
    )
    group.add_argument("--split", default="test", help="split of --data to decode")
    group.add_argument("--draft-head", metavar="HEAD.pt", help=option_help("draft_head"))
    group.add_argument(
        "--source-lang", "-s", help="source language (default: checkpoint's)"
    )
    group.add_argument(
        "--target-lang", "-t", help="target language (default: checkpoint's)"
    )
    group.add_argument(
        "--src-file",
        metavar="TXT",
        help="raw source text instead of --split (needs --ref-file and " "--spm-model)",
    )
    group.add_argument(
        "--ref-file",
        metavar="TXT",
        help="raw detokenized references, line-aligned with the test set; "
        "BLEU is always computed against raw text",
    )
    group.add_argument(
        "--spm-model",
        metavar="MODEL",
        help="SentencePiece model: encodes --src-file and detokenizes "
        "hypotheses; REQUIRED with --data when --ref-file is not given, "
        "to decode the binarized references into raw text",
    )
    group.add_argument(
        "--post-process",
        default="sentencepiece",
        help="fairseq --post-process for hypotheses when no --spm-model",
    )
    first = group.add_argument(
        "--first-sentences",
        "--limit",
        dest="max_sentences",
        type=int,
        metavar="N",
        help="decode only the first N sentences of the test set (default: all)",
    )
    # fairseq's --max-sentences is a batch size: the old name misled.
    add_deprecated_alias(group, "--max-sentences", first)


def _add_decoding_args(group) -> None:
    group.add_argument(
        "--beams",
        type=int,
        nargs="+",
        default=[1, 5],
        help="stock beam sizes (beam 1 is always run: it is the baseline)",
    )
    group.add_argument("--max-len-a", type=float, default=0.0,
                       help="longest output = a * source length + b")
    group.add_argument("--max-len-b", type=int, default=200,
                       help="longest output = a * source length + b")
    group.add_argument("--min-len", type=int, default=1, help="fewest tokens before EOS")
    group.add_argument("--lenpen", type=float, default=1.0,
                       help="length penalty: score = sum / length ** lenpen")
    group.add_argument("--unkpen", type=float, default=0.0,
                       help="subtracted from the unknown word's log-probability")
    _add_grid_args(group)
    group.add_argument(
        "--ct2",
        action="store_true",
        help="add CTranslate2 fp32 and int8 greedy rows: the verifier is exported "
        "as a stock transformer and converted (needs the ctranslate2 package)",
    )
    for flag, dtype in (("--fp16", "float16"), ("--bf16", "bfloat16")):
        group.add_argument(
            flag, dest="precisions", action="append_const", const=dtype, default=[],
            help=f"also run stock greedy, the engine's torch rows and (where the device "
            f"has it) CTranslate2 greedy on a {dtype} copy of the model",
        )
    group.add_argument(
        "--stock-only",
        action="store_true",
        help="no SpecDec rows (for checkpoints without a draft head)",
    )


def _grid_help(intro: str, name: str) -> str:
    """A grid flag's help: what it runs, then the decoding flag each row sets
    (``nmt-specdec-translate --help`` says what that does)."""
    return f"{intro} (as {option_flag(name)})"


def _add_grid_args(group) -> None:
    """The SpecDec rows: one per combination of these decoding options' values."""
    add = group.add_argument
    add("--grid-k", type=int, nargs="+", default=[], help=_grid_help(
        "fixed draft block sizes K of the SpecDec rows (default: the model's draft block "
        "size); the engine's own greedy decoding (K=0, the 'vs engine greedy' reference) "
        "always runs", "k"))
    add("--grid-auto", action="store_true", help=_grid_help(
        "also run K chosen per iteration (auto), up to the model's draft block size", "k"))
    add("--grid-beta", type=int, nargs="+", default=[1, 3, 5],
        help=_grid_help("top-beta widths", "beta"))
    add("--grid-tau", type=float, nargs="+", default=[1.0, 3.0], help=_grid_help(
        "log-prob margins (beta=1 rows run once: tau is unused there)", "tau"))
    add("--grid-candidates", type=int, nargs="+", default=[1], help=_grid_help(
        "drafts verified per slot for K > 0", "candidates"))
    add("--grid-refine-steps", type=int, nargs="+", default=[], help=_grid_help(
        "times the draft head's refinement runs, for K > 0 (default: the head's own "
        "setting); several compare them in one run", "refine_steps"))
    add("--relaxed-rows", choices=("all", "one"), default="all", help=(
        "all: the relaxed rows (beta > 1) at every K, auto, backend and precision; one: at "
        "the first K > 0 on the first backend in fp32 only"))
    add("--drafters", nargs="+", choices=DRAFTERS, default=["head"], help=_grid_help(
        "who drafts the rows with K > 0: the head's rows always run, and verifier-int8 "
        "(verifier-int4) adds each onnxruntime fp32 chain row drafted by the verifier's "
        "8-bit (4-bit) copy", "drafter"))
    add("--grid-copy-k", type=int, nargs="+", default=[], help=_grid_help(
        "fixed K of the verifier copies' rows (default: --grid-k's above 0): a copy "
        "accepts well at K far beyond the head's block size", "k"))
    add("--backend", dest="backends", nargs="+", choices=BACKENDS, default=[DEFAULT_BACKEND],
        help=_grid_help("who runs the SpecDec rows' model calls; several: every SpecDec row "
                        "on each, in the same interleaved run", "backend"))
    add("--int8", action="store_true",
        help=_grid_help("also run the onnxruntime SpecDec rows in 8 bits", "int8"))
    add("--fused-draft", action="store_true", help=_grid_help(
        "also run the onnxruntime SpecDec rows (K > 0) with one call per iteration",
        "fused_draft"))
    add("--sampling-topk", type=int, metavar="K", help=(
        "also run the sampling grid, fairseq's --sampling --sampling-topk K: stock "
        "sampling, the engine's sampling (K=0) and speculative sampling at each --grid-k "
        "above 0, on each --backend (its rows compare with stock sampling and with the "
        "engine's sampling; the samples are seeded with --order-seed)"))
    add("--graphs-off", action="store_true", help=_grid_help(
        "on a GPU, also run every torch row with its static passes eager (no CUDA graphs)",
        "cuda_graphs"))


def _add_timing_args(group) -> None:
    from nmt_specdec.evaluation.pipeline import TIME_SPLIT_PNG

    group.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32],
                       help="sentences per batch; every row is timed at each")
    group.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="timed passes per row; the median and the min-max are reported",
    )
    group.add_argument(
        "--order-seed",
        type=int,
        default=0,
        help="seed of the random order in which each repeat runs the rows' passes "
        "(a fresh order per repeat; recorded in results.json)",
    )
    group.add_argument(
        "--warmup-batches",
        type=int,
        default=1,
        help="untimed batches per row before timing",
    )
    group.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch.set_num_threads (1: stable CPU timings)",
    )
    group.add_argument(
        "--cpu", action="store_true", help="decode on the CPU even with CUDA"
    )
    group.add_argument(
        "--profile",
        action="store_true",
        help="one extra pass per SpecDec row, split into encoder / draft / "
        f"verify / bookkeeping milliseconds per token (results.md, {TIME_SPLIT_PNG})",
    )
    group.add_argument(
        "--no-progress", dest="progress", action="store_false", help="no progress bar"
    )


def config_from_args(args: argparse.Namespace, argv: List[str]) -> EvalConfig:
    values = {name: value for name, value in vars(args).items()
              if name not in ("user_dir", "verbose")}
    values = {
        name: tuple(v) if isinstance(v, list) else v for name, v in values.items()
    }
    return EvalConfig(**values, command=shlex.join(["nmt-specdec-evaluate", *argv]))


def main(argv: Optional[List[str]] = None) -> int:
    """Parses, runs, prints the markdown table; user mistakes exit 2 with one line."""
    argv = sys.argv[1:] if argv is None else list(argv)
    logs.setup()  # quiet before the parser imports fairseq; --verbose is read next
    args = build_parser().parse_args(argv)
    logs.setup(args.verbose)
    from nmt_specdec.evaluation.pipeline import (
        PLOT_PNG,
        RESULTS_JSON,
        RESULTS_MD,
        TIME_SPLIT_PNG,
        run,
    )
    from nmt_specdec.evaluation.report import markdown_table

    if args.repeats < 5:  # a choice the quickstart makes knowingly, a user is told
        logging.getLogger("nmt_specdec.evaluation").warning(
            "--repeats %d: medians of fewer than 5 passes are noisy", args.repeats)
    try:
        checkpoints.register_plugin(args.user_dir)
        results = run(config_from_args(args, argv))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(markdown_table(results["rows"]))
    written = [RESULTS_MD, PLOT_PNG] + ([TIME_SPLIT_PNG] if args.profile else [])
    print(f"\nwrote {os.path.join(args.out, RESULTS_JSON)}, {', '.join(written)}")
    return 0


if __name__ == "__main__":  # python -m nmt_specdec.evaluation.cli, as the console script
    sys.exit(main())
