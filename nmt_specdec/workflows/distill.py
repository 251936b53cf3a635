"""Sequence-level knowledge distillation (Kim & Rush, 2016) of a binarized split.

A trained checkpoint translates every source sentence of ``{split}`` with
fairseq's stock SequenceGenerator (beam 5 by default); the hypotheses, in the
original order, are binarized with the data's target dictionary into
``{out}/{split}.{src}-{tgt}.{tgt}.{bin,idx}``, the layout
``--distill-data`` of ``translation_specdec`` reads. The source side and the
dictionaries are linked (or copied) next to them, so ``{out}`` is also a
complete data directory (``--verifier-on-distilled``).

Work is done in chunks of sentences; each chunk is written atomically to
``{out}/chunks/`` and skipped by a rerun, so an interrupted run resumes.
Progress is logged; the libraries' INFO logs only with ``-v/--verbose``.
Entry point: ``nmt-specdec-distill``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from nmt_specdec import logs
from nmt_specdec.data.steps import (
    LOG,
    OneLineParser,
    RecipeError,
    atomic_text,
    run_command,
)
from nmt_specdec.model_shards import materialize

# (B,) token-id lists in, one hypothesis (ids, EOS excluded) per sentence out.
Translate = Callable[[list[list[int]]], list[list[int]]]
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class DistillConfig:
    """Settings of one distillation run (mirrors the command-line flags).

    Attributes:
        data: Binarized data directory (dictionaries and ``{split}`` source).
        checkpoint: Trained fairseq checkpoint that translates.
        out: Output directory (usable as ``--distill-data``).
        split: Split to translate (normally ``train``).
        source_lang: Source language (default: the checkpoint's).
        target_lang: Target language (default: the checkpoint's).
        beam: Beam size of the stock SequenceGenerator.
        max_len_a: fairseq ``--max-len-a``.
        max_len_b: fairseq ``--max-len-b``.
        lenpen: fairseq ``--lenpen``.
        max_tokens: Source tokens per batch.
        batch_size: Sentences per batch at most.
        chunk_size: Sentences per resumable chunk.
        threads: ``torch.set_num_threads`` on the CPU.
        cpu: Translate on the CPU even when CUDA is available.
    """

    data: Path
    checkpoint: Path
    out: Path
    split: str = "train"
    source_lang: str | None = None
    target_lang: str | None = None
    beam: int = 5
    max_len_a: float = 1.2
    max_len_b: int = 10
    lenpen: float = 1.0
    max_tokens: int = 8000
    batch_size: int = 128
    chunk_size: int = 20_000
    threads: int = 2
    cpu: bool = False

    def validate(self) -> None:
        """Raise RecipeError naming the first bad option."""
        if not self.data.is_dir():
            raise RecipeError(f"--data {self.data} is not a directory")
        if not materialize(self.checkpoint).is_file():
            raise RecipeError(f"--checkpoint {self.checkpoint} does not exist")
        for flag, value in (("--beam", self.beam), ("--max-tokens", self.max_tokens),
                            ("--batch-size", self.batch_size),
                            ("--chunk-size", self.chunk_size),
                            ("--threads", self.threads)):
            if value < 1:
                raise RecipeError(f"{flag} must be >= 1, got {value}")


def chunk_ranges(n: int, size: int) -> list[tuple[int, int]]:
    """Half-open ``[start, end)`` ranges covering ``0..n`` in steps of ``size``."""
    return [(start, min(start + size, n)) for start in range(0, n, size)]


def make_batches(lengths: Mapping[int, int], indices: Iterable[int], max_tokens: int,
                 batch_size: int) -> Iterator[list[int]]:
    """Group ``indices`` into batches of similar length (longest first).

    A batch holds at most ``batch_size`` sentences and ``max_tokens`` padded
    source tokens; a single sentence longer than ``max_tokens`` still gets a
    batch of its own.
    """
    order = sorted(indices, key=lambda i: (-lengths[i], i))
    batch: list[int] = []
    for index in order:
        width = max([lengths[index]] + [lengths[i] for i in batch[:1]])
        full = len(batch) == batch_size or width * (len(batch) + 1) > max_tokens
        if batch and full:
            yield batch
            batch = []
        batch.append(index)
    if batch:
        yield batch


def translate_chunk(sources: Sequence[list[int]], start: int, end: int,
                    translate: Translate, max_tokens: int, batch_size: int,
                    on_batch: Callable[[int], None] = lambda n: None,
                    ) -> list[list[int]]:
    """Translate ``sources[start:end]`` and return hypotheses in input order."""
    lengths = {i: len(sources[i]) for i in range(start, end)}
    out: dict[int, list[int]] = {}
    for batch in make_batches(lengths, range(start, end), max_tokens, batch_size):
        for index, hypo in zip(batch, translate([sources[i] for i in batch])):
            out[index] = hypo
        on_batch(len(batch))
    return [out[i] for i in range(start, end)]


def distill_chunks(sources: Sequence[list[int]], chunk_dir: Path, translate: Translate,
                   symbols: Callable[[list[int]], str], max_tokens: int = 8000,
                   batch_size: int = 128, chunk_size: int = 20_000) -> list[Path]:
    """Translate every sentence, one atomically written text file per chunk.

    Chunk files that already exist are finished work and are skipped.

    Args:
        sources: Source token ids per sentence (EOS included, as stored).
        chunk_dir: Directory of ``{start:09d}-{end:09d}.txt`` chunk files.
        translate: Batch translator (see ``Translate``).
        symbols: Token ids -> one line of dictionary symbols.
        max_tokens: Source tokens per batch.
        batch_size: Sentences per batch.
        chunk_size: Sentences per chunk.

    Returns:
        Chunk files in order.
    """
    from tqdm import tqdm

    ranges = chunk_ranges(len(sources), chunk_size)
    paths = [chunk_dir / f"{start:09d}-{end:09d}.txt" for start, end in ranges]
    done = sum(end - start for (start, end), p in zip(ranges, paths) if p.is_file())
    if done:
        LOG.info("resuming: %d of %d sentences already distilled", done, len(sources))
    with tqdm(total=len(sources), initial=done, unit="sent", desc="distill",
              dynamic_ncols=True) as bar:
        for (start, end), path in zip(ranges, paths):
            if path.is_file():
                continue
            hypos = translate_chunk(sources, start, end, translate, max_tokens,
                                    batch_size, bar.update)
            with atomic_text(path) as handle:
                handle.writelines(symbols(h) + "\n" for h in hypos)
    return paths


def fairseq_translator(task, model, cfg: DistillConfig, device) -> Translate:
    """A ``Translate`` that runs fairseq's SequenceGenerator on ``model``."""
    import torch
    from fairseq.data import data_utils
    from fairseq.dataclass.configs import GenerationConfig

    gen_cfg = GenerationConfig()
    gen_cfg.beam, gen_cfg.lenpen = cfg.beam, cfg.lenpen
    gen_cfg.max_len_a, gen_cfg.max_len_b = cfg.max_len_a, cfg.max_len_b
    generator = task.build_generator([model], gen_cfg)
    pad, eos = task.source_dictionary.pad(), task.source_dictionary.eos()

    def translate(batch: list[list[int]]) -> list[list[int]]:
        rows = [torch.tensor(ids, dtype=torch.long) for ids in batch]
        # fairseq's translation data is left-padded on the source side.
        tokens = data_utils.collate_tokens(rows, pad, eos, left_pad=True)  # (B, S)
        sample = {"net_input": {
            "src_tokens": tokens.to(device),
            "src_lengths": torch.tensor([len(r) for r in rows], device=device),
        }}
        with torch.no_grad():
            hypos = task.inference_step(generator, [model], sample)
        return [_strip_eos(h[0]["tokens"].tolist(), eos) for h in hypos]

    return translate


class _TokenLists(Sequence):
    """Read-only view of an indexed dataset as lists of ids (loaded lazily)."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index):  # type: ignore[override]
        return self.dataset[index].tolist()


def _strip_eos(ids: list[int], eos: int) -> list[int]:
    return ids[:-1] if ids and ids[-1] == eos else ids


def binarize_chunks(paths: Sequence[Path], dictionary, out_prefix: Path) -> int:
    """Binarize chunk files (in order) into ``out_prefix.{bin,idx}``.

    Returns:
        Number of sentences written.
    """
    from fairseq.data import indexed_dataset

    tmp = out_prefix.with_name(out_prefix.name + ".tmp")
    builder = indexed_dataset.make_builder(str(tmp) + ".bin", impl="mmap",
                                           vocab_size=len(dictionary))
    count = 0
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                ids = dictionary.encode_line(line.rstrip("\n"), add_if_not_exist=False,
                                             append_eos=True)
                builder.add_item(ids)
                count += 1
    builder.finalize(str(tmp) + ".idx")
    for ext in (".bin", ".idx"):
        os.replace(str(tmp) + ext, str(out_prefix) + ext)
    return count


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _prepare_out(cfg: DistillConfig, src: str, tgt: str) -> Path:
    """Create ``out``; wipe chunks made with other settings. Returns the chunk dir."""
    chunk_dir = cfg.out / "chunks"
    manifest = cfg.out / MANIFEST
    keep = ("data", "checkpoint", "split", "beam", "max_len_a", "max_len_b", "lenpen",
            "chunk_size")
    params = {k: str(v) for k, v in asdict(cfg).items() if k in keep}
    params.update(src=src, tgt=tgt,
                  checkpoint_mtime=str(cfg.checkpoint.stat().st_mtime))
    wanted = json.dumps(params, indent=1, sort_keys=True)
    same = manifest.is_file() and manifest.read_text() == wanted
    if chunk_dir.exists() and not same:
        LOG.info("settings changed: discarding old chunks in %s", chunk_dir)
        shutil.rmtree(chunk_dir)
    chunk_dir.mkdir(parents=True, exist_ok=True)
    manifest.write_text(wanted)
    return chunk_dir


def run(cfg: DistillConfig, translate: Translate | None = None) -> Path:
    """Distil ``cfg.split`` and write a ``--distill-data`` directory.

    Args:
        cfg: Settings.
        translate: Replaces the checkpoint's generator (tests use stubs).

    Returns:
        The binarized target prefix ``{out}/{split}.{src}-{tgt}.{tgt}``.
    """
    import torch

    cfg.validate()
    task, model, device = _load(cfg)
    src, tgt = task.cfg.source_lang, task.cfg.target_lang
    prefix = cfg.data / f"{cfg.split}.{src}-{tgt}.{src}"
    from fairseq.data import data_utils

    dataset = data_utils.load_indexed_dataset(str(prefix), task.source_dictionary)
    if dataset is None:
        raise RecipeError(f"no binarized source at {prefix}.{{bin,idx}} (check --split "
                          "and --source-lang/--target-lang)")
    sources = _TokenLists(dataset)
    chunk_dir = _prepare_out(cfg, src, tgt)
    if translate is None:
        torch.set_num_threads(cfg.threads)
        translate = fairseq_translator(task, model, cfg, device)
    tgt_dict = task.target_dictionary
    paths = distill_chunks(sources, chunk_dir, translate, tgt_dict.string,
                           cfg.max_tokens, cfg.batch_size, cfg.chunk_size)
    out_prefix = cfg.out / f"{cfg.split}.{src}-{tgt}.{tgt}"
    count = binarize_chunks(paths, tgt_dict, out_prefix)
    assert count == len(sources), (count, len(sources))
    for name in (f"dict.{src}.txt", f"dict.{tgt}.txt", prefix.name + ".bin",
                 prefix.name + ".idx"):
        _link_or_copy(cfg.data / name, cfg.out / name)
    LOG.info("distilled %d sentences into %s.{bin,idx}", count, out_prefix)
    return out_prefix


def _load(cfg: DistillConfig):
    """Load the checkpoint (safely, see :mod:`nmt_specdec.checkpoints`) and its task."""
    import torch

    from nmt_specdec import checkpoints

    checkpoints.register_plugin()
    overrides = {"data": str(cfg.data), "source_lang": cfg.source_lang or None,
                 "target_lang": cfg.target_lang or None}
    model, task = checkpoints.load(str(cfg.checkpoint), overrides)
    use_cuda = torch.cuda.is_available() and not cfg.cpu
    device = torch.device("cuda" if use_cuda else "cpu")
    model = model.to(device).eval()
    return task, model, device


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags (defaults come from DistillConfig)."""
    d = DistillConfig(Path("."), Path("."), Path("."))
    p = OneLineParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="binarized data directory")
    p.add_argument("--checkpoint", type=Path, required=True, help="teacher checkpoint")
    p.add_argument("--out", type=Path, required=True,
                   help="output directory (use as --distill-data)")
    p.add_argument("--split", default=d.split)
    p.add_argument("--source-lang", default=None)
    p.add_argument("--target-lang", default=None)
    for name in ("beam", "max_tokens", "batch_size", "chunk_size", "threads",
                 "max_len_b"):
        p.add_argument("--" + name.replace("_", "-"), type=int,
                       default=getattr(d, name))
    p.add_argument("--max-len-a", type=float, default=d.max_len_a)
    p.add_argument("--lenpen", type=float, default=d.lenpen)
    p.add_argument("--cpu", action="store_true", help="do not use CUDA")
    logs.add_verbose_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse flags and run; user mistakes exit 2 with one line."""
    return run_command(build_parser(), lambda args: run(DistillConfig(**args)), argv)


if __name__ == "__main__":  # python -m nmt_specdec.workflows.distill, as the console script
    sys.exit(main())
