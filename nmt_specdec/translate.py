"""``nmt-specdec-translate``: raw text in, raw translations out, line for line.

Reads raw source text (a file or stdin), encodes it with SentencePiece,
translates it with one fairseq checkpoint (SpecDec draft-and-verify with
``--spec-decoding``, else fairseq's beam search), detokenizes, and writes
exactly one output line per input line, in input order, whatever the input:

* **Lines** are split at ``\\n`` only (a trailing ``\\r`` is dropped), so a
  stray ``\\r``, form feed or U+2028 inside a line never adds an output line.
* **Control characters** (Unicode category Cc), line/paragraph separators and
  all other whitespace become one space; a byte-order mark is removed; lone
  surrogates become U+FFFD. Emoji, CJK, right-to-left text and combining marks
  are left alone: SentencePiece normalizes them (NFKC) and maps symbols it
  does not know to ``<unk>``.
* **Invalid UTF-8** is decoded with ``errors="replace"`` (each bad byte
  sequence becomes U+FFFD, hence ``<unk>``) and a warning names the line.
  Rejecting the file would lose every good line for one bad byte, and
  skipping the line would break the one-line-per-line contract.
* **Empty or whitespace-only** lines give an empty output line; the model is
  not called for them.
* **Over-long lines** (more pieces than the model has source positions) are
  split into chunks, preferably after sentence punctuation, else before a
  word, else at the length limit; each chunk is translated on its own and the
  translations are joined with a space. A warning names the line. Nothing is
  truncated or dropped.

Sentences are decoded in length-sorted batches of ``--batch-size`` and put
back in input order. With ``--sampling`` a sentence's sample depends on
``--seed``, the sentence and its position in the input alone. Input is
processed in blocks of ``BLOCK_LINES`` lines.

Shapes: B sentences in a batch, S source pieces.
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, List, NamedTuple, Optional, Sequence

from nmt_specdec import checkpoints, logs, shipped_models
from nmt_specdec.arguments import HelpFormatter
from nmt_specdec.decoding.generation_config import add_sampling_flags, seed_torch
from nmt_specdec.decoding.options import DecodingOptions, add_flags, flag_names
from nmt_specdec.errors import UserError
from nmt_specdec.raw_text import (  # noqa: F401  (re-exported: the CLI's text steps)
    SENTENCE_END, SPIECE_UNDERLINE, chunk_pieces, clean_text, decode_lines, detokenize,
    open_stream, read_line_blocks, split_lines)

logger = logging.getLogger("nmt_specdec.translate")

# Lines read, translated and written at a time.
BLOCK_LINES = 2048
# A sentence's sampling key is line * MAX_CHUNKS + chunk: unique while no line
# is cut into more chunks than this.
MAX_CHUNKS = 1 << 16

INVALID_BYTES_HELP = (
    "invalid UTF-8 bytes are replaced by U+FFFD (decoded with "
    "errors='replace') and a warning names the line"
)
LONG_LINE_HELP = (
    "a line longer than the model's source positions is split at sentence "
    "punctuation or word boundaries, each chunk translated, and the results "
    "joined with a space (a warning names the line)"
)


# ----------------------------------------------------------------- config


@dataclass(frozen=True)
class TranslateConfig:
    """Options of ``nmt-specdec-translate`` (help strings: :func:`build_parser`;
    ``decoding``'s: :class:`~nmt_specdec.decoding.options.DecodingOptions`)."""

    checkpoint: str
    spm_model: str
    input: str = "-"
    output: str = "-"
    data: Optional[str] = None
    source_lang: Optional[str] = None
    target_lang: Optional[str] = None
    decoding: DecodingOptions = DecodingOptions()
    beam: int = 5
    batch_size: int = 32
    max_len_a: float = 0.0
    max_len_b: int = 200
    cpu: bool = False
    fp16: bool = False
    bf16: bool = False
    sampling: bool = False
    sampling_topk: int = -1
    sampling_topp: float = -1.0
    temperature: float = 1.0
    seed: Optional[int] = None

    def __post_init__(self) -> None:
        if self.beam < 1:
            raise UserError(f"--beam must be >= 1, got {self.beam}")
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be >= 1, got {self.batch_size}")
        for flag, path in (("--spm-model", self.spm_model), ("--input", self.input)):
            if path != "-" and (not os.path.exists(path) or os.path.isdir(path)):
                raise UserError(f"{flag}: no such file {path}")
        if self.data is not None and not os.path.isdir(self.data):
            raise UserError(f"--data: no such directory {self.data}")
        if self.fp16 and self.bf16:
            raise UserError("--fp16 and --bf16 exclude each other")
        if (self.fp16 or self.bf16) and self.decoding.spec_decoding:
            from nmt_specdec.decoding.backends import check_half

            check_half(self.decoding.backend)

    @property
    def dtype(self):
        """The model's float type: float32 unless --fp16 or --bf16."""
        import torch

        return torch.float16 if self.fp16 else torch.bfloat16 if self.bf16 else torch.float32


# ------------------------------------------------------------ model calls


class Translator(NamedTuple):
    """A loaded checkpoint, ready to translate.

    Attributes:
        task: the fairseq task (dictionaries, batching, inference_step).
        model: the model, in eval mode on its device.
        generator: SpecDecGenerator or fairseq's SequenceGenerator.
        spm: the SentencePiece processor.
        max_source_pieces: most pieces one chunk may have (positions minus EOS).
        device: where the model runs.
    """

    task: Any
    model: Any
    generator: Any
    spm: Any
    max_source_pieces: int
    device: Any


def load_translator(cfg: TranslateConfig) -> Translator:
    """Loads the checkpoint (safely, see :mod:`nmt_specdec.checkpoints`) and the generator.

    Raises:
        UserError: a missing or foreign file, a checkpoint that cannot run the
            requested decoding, or a SentencePiece model that does not match.
    """
    import sentencepiece
    import torch
    from fairseq import utils

    from nmt_specdec.decoding.backends import cpu_only

    try:
        spm = sentencepiece.SentencePieceProcessor(model_file=cfg.spm_model)
    except (OSError, RuntimeError) as err:
        raise UserError(f"--spm-model {cfg.spm_model} is not a SentencePiece model "
                        f"({' '.join(str(err).split())[:120]})") from None
    model, task = _load_model(cfg)
    _check_spm_matches(spm, task.source_dictionary, cfg.spm_model)
    on_cpu = cfg.cpu or cpu_only(cfg.decoding.backend)
    device = torch.device("cuda" if torch.cuda.is_available() and not on_cpu else "cpu")
    model.to(device=device, dtype=cfg.dtype).eval()
    generator = _build_generator(cfg, task, model)
    max_src = utils.resolve_max_positions(task.max_positions(), model.max_positions())[0]
    return Translator(task, model, generator, spm, int(max_src) - 1, device)


def _load_model(cfg: TranslateConfig):
    """The model and task; under ``--spec-decoding`` a stock checkpoint's task is
    ``translation_specdec`` (its inference dataset tolerates hostile input)."""
    overrides = {"data": _data_directory(cfg), "source_lang": cfg.source_lang,
                 "target_lang": cfg.target_lang}
    return checkpoints.load(cfg.checkpoint, overrides, specdec_task=cfg.decoding.spec_decoding)


def _data_directory(cfg: TranslateConfig) -> Optional[str]:
    """``--data``; without it the checkpoint's own directory when it holds
    dictionaries (a shipped model), else None: the checkpoint's training data."""
    if cfg.data is not None:
        return cfg.data
    beside = os.path.dirname(os.path.abspath(cfg.checkpoint))
    return beside if glob.glob(os.path.join(beside, "dict.*.txt")) else None


def _check_spm_matches(spm, dictionary, path: str) -> None:
    """Refuses a SentencePiece model whose pieces the source dictionary lacks."""
    pieces = [
        spm.id_to_piece(i)
        for i in range(spm.get_piece_size())
        if not (spm.is_control(i) or spm.is_unknown(i))
    ]
    known = sum(dictionary.index(p) != dictionary.unk() for p in pieces)
    if pieces and known * 2 < len(pieces):
        raise UserError(
            f"--spm-model {path} does not match the checkpoint's source "
            f"dictionary: only {known} of its {len(pieces)} pieces are in it; "
            "use the SentencePiece model the training data was encoded with"
        )


def _build_generator(cfg: TranslateConfig, task, model):
    from fairseq.dataclass.configs import GenerationConfig

    from nmt_specdec.decoding.build import build_decoder, fairseq_generator

    gen = GenerationConfig()
    gen.beam = 1 if cfg.decoding.spec_decoding else cfg.beam
    gen.max_len_a, gen.max_len_b = cfg.max_len_a, cfg.max_len_b
    gen.sampling, gen.sampling_topk, gen.sampling_topp = (cfg.sampling, cfg.sampling_topk,
                                                          cfg.sampling_topp)
    gen.temperature = cfg.temperature
    return build_decoder(model, task.target_dictionary, cfg.decoding, gen,
                         fairseq_generator(task, model, gen))


def translate_lines(
    lines: Sequence[str], translator: Translator, batch_size: int, first_line: int = 1
) -> List[str]:
    """Translates text lines; one output line per input line, in order.

    Args:
        lines: decoded input lines (no newlines).
        translator: from :func:`load_translator`.
        batch_size: most sentences (chunks) per model call.
        first_line: 1-based input line number of ``lines[0]``, for warnings.

    Returns:
        Detokenized translations; ``""`` for lines that are empty once cleaned.
    """
    owners, sources, keys = [], [], []
    src_dict = translator.task.source_dictionary
    for index, line in enumerate(lines):
        number = first_line + index
        text = clean_text(line)
        pieces = translator.spm.encode(text, out_type=str) if text else []
        chunks = chunk_pieces(pieces, translator.max_source_pieces) if pieces else []
        if len(chunks) > 1:
            logger.warning(
                "input line %d: %d pieces exceed the model's %d source positions; "
                "translated in %d chunks joined by spaces",
                number,
                len(pieces),
                translator.max_source_pieces + 1,
                len(chunks),
            )
        for part, chunk in enumerate(chunks):
            owners.append(index)
            keys.append(number * MAX_CHUNKS + part)  # its position in the whole input
            sources.append([src_dict.index(p) for p in chunk] + [src_dict.eos()])
    parts: List[List[str]] = [[] for _ in lines]
    for owner, text in zip(owners, _generate(translator, sources, batch_size, keys)):
        parts[owner].append(text)
    return [" ".join(p for p in line_parts if p) for line_parts in parts]


def _generate(
    translator: Translator, sources: List[List[int]], batch_size: int, keys: List[int]
) -> List[str]:
    """Translations of token-id sources, in their order (batched by length);
    ``keys``: each source's position in the whole input, the ``id`` a sampling
    generator keys its draws by."""
    import torch
    from fairseq import utils

    task, tgt_dict = translator.task, translator.task.target_dictionary
    tensors = [torch.tensor(s, dtype=torch.long) for s in sources]
    dataset = task.build_dataset_for_inference(tensors, [t.numel() for t in tensors])
    order = sorted(range(len(tensors)), key=lambda i: tensors[i].numel())
    strip = {tgt_dict.eos()} | set(
        getattr(translator.generator, "symbols_to_strip_from_output", set())
    )
    outputs = [""] * len(tensors)
    for start in range(0, len(order), batch_size):
        sample = dataset.collater(
            [dataset[i] for i in order[start : start + batch_size]]
        )
        sample = (
            utils.move_to_cuda(sample) if translator.device.type == "cuda" else sample
        )
        indices = sample["id"].tolist()
        sample["id"] = torch.tensor([keys[i] for i in indices])
        hypos = task.inference_step(translator.generator, [translator.model], sample)
        for row, index in enumerate(indices):
            tokens = hypos[row][0]["tokens"].int().cpu()
            outputs[index] = detokenize(
                tgt_dict.string(tokens, extra_symbols_to_ignore=strip)
            )
    return outputs


def run(cfg: TranslateConfig) -> int:
    """Translates ``cfg.input`` into ``cfg.output``; returns the lines written.

    The input is read, translated and written in blocks of :data:`BLOCK_LINES`
    lines, so memory stays flat and a pipe sees output as it is produced.
    """
    with open_stream(cfg.input, "rb", sys.stdin.buffer, "--input: cannot read") as source:
        translator = load_translator(cfg)
        with open_stream(
            cfg.output, "wb", sys.stdout.buffer, "--output: cannot write"
        ) as sink:
            written = 0
            for block in read_line_blocks(source, BLOCK_LINES):
                lines = decode_lines(block, first_line=written + 1)
                outputs = translate_lines(
                    lines, translator, cfg.batch_size, written + 1
                )
                assert len(outputs) == len(lines)
                sink.write("".join(line + "\n" for line in outputs).encode("utf-8"))
                sink.flush()
                written += len(outputs)
    return written


# -------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nmt-specdec-translate", formatter_class=HelpFormatter,
        description="Translate raw text line by line with a fairseq checkpoint: exactly "
        "one output line per input line, in order. Empty lines give empty "
        f"lines; {INVALID_BYTES_HELP}; {LONG_LINE_HELP}.",
    )
    add = parser.add_argument
    add("--checkpoint", "--path", metavar="PT", help="fairseq checkpoint (default: the shipped "
        "Transformer-base model, models/gettext-de-en-base/model.pt, with its draft head)")
    add("--spm-model", metavar="MODEL", help="SentencePiece model the training data was encoded "
        "with (default: spm.model in the checkpoint's directory)")
    add("--input", "-i", default="-", help="raw source text, one sentence per line "
        "(default: stdin)")
    add("--output", "-o", default="-", help="translations (default: stdout)")
    add("--data", metavar="DIR", help="directory with dict.SRC.txt/dict.TGT.txt (default: the "
        "checkpoint's directory if it has them, else the checkpoint's training data directory)")
    add("--source-lang", "-s", help="source language (default: the checkpoint's)")
    add("--target-lang", "-t", help="target language (default: the checkpoint's)")
    add_flags(parser.add_argument_group("decoding"))
    add("--beam", type=int, default=5, help="beam size without --spec-decoding")
    add("--batch-size", type=int, default=32, help="sentences per model call")
    add("--max-len-a", type=float, default=0.0, help="max length = a * src_len + b")
    add("--max-len-b", type=int, default=200, help="max length = a * src_len + b")
    add("--cpu", action="store_true", help="run on the CPU even if CUDA is available")
    add("--fp16", action="store_true", help="decode in float16 (for a GPU; slow on most CPUs)")
    add("--bf16", action="store_true", help="decode in bfloat16")
    add_sampling_flags(parser.add_argument_group("sampling (fairseq's flags)"))
    add(
        "--user-dir",
        default=None,
        metavar="DIR",
        help="fairseq plugin to register (default: this project's fairseq_plugins)",
    )
    logs.add_verbose_flag(parser)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``nmt-specdec-translate``; returns the exit status."""
    args = build_parser().parse_args(argv)
    logs.setup(args.verbose)  # before fairseq's import configures logging
    try:
        seed_torch(args.seed)
        checkpoints.register_plugin(args.user_dir)
        if args.checkpoint is None:  # the shipped base model, drafting with its own head
            shipped = shipped_models.ShippedModel.at()
            args.checkpoint = str(shipped.checkpoint)
            if args.spec_decoding and args.spec_drafter == "head" and not args.draft_head:
                args.draft_head = str(shipped.draft_head)
        args.spm_model = args.spm_model or shipped_models.spm_beside(args.checkpoint)
        decoding = DecodingOptions.from_flags(args)
        skip = {"user_dir", "verbose", *flag_names()}
        values = {k: v for k, v in vars(args).items() if k not in skip}
        run(TranslateConfig(**values, decoding=decoding))
    except UserError as err:
        sys.stdout.flush()
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
