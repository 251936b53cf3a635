"""Joint SentencePiece model, piece encoding/decoding, fairseq binarization.

Encoded files hold space-separated pieces (``▁Das ▁ist ▁gut .``), the format
``fairseq-preprocess`` expects; ``decode_line`` undoes it exactly like
fairseq's ``--post-process sentencepiece``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Sequence

from nmt_specdec.data.splits import split_paths
from nmt_specdec.data.steps import LOG, RecipeError, atomic_text, count_lines
from nmt_specdec.hashing import file_sha256

SPIECE_UNDERLINE = "\u2581"
_BATCH = 10_000


@dataclass(frozen=True)
class SpmConfig:
    """SentencePiece training settings.

    Attributes:
        vocab_size: Size of the joint vocabulary.
        model_type: ``unigram`` or ``bpe``.
        character_coverage: Share of characters covered; rare symbols beyond
            it become ``<unk>`` instead of wasting vocabulary slots.
        input_sentence_size: Train on at most this many lines (0 = all).
        shuffle: Sample those lines at random (seeded) rather than taking
            the first ones; only needed when the input is not pre-shuffled.
        seed: Seed for SentencePiece's random generator.
        num_threads: Trainer threads.
    """

    vocab_size: int = 8000
    model_type: str = "unigram"
    character_coverage: float = 0.9999
    input_sentence_size: int = 2_000_000
    shuffle: bool = False
    seed: int = 1
    num_threads: int = 2


def train_spm(inputs: Sequence[Path], model_prefix: Path, cfg: SpmConfig) -> Path:
    """Train one SentencePiece model on all ``inputs`` (joint vocabulary).

    Args:
        inputs: Text files, one sentence per line (e.g. train.de, train.en).
        model_prefix: Output prefix; writes ``.model`` and ``.vocab``.
        cfg: Training settings.

    Returns:
        Path of the ``.model`` file.

    Raises:
        RecipeError: Settings the data cannot satisfy (e.g. vocab too large).
    """
    import sentencepiece as spm  # imported lazily: only this step needs it

    if cfg.vocab_size < 10:
        raise RecipeError("--vocab-size must be at least 10")
    spm.set_random_generator_seed(cfg.seed)
    model_prefix.parent.mkdir(parents=True, exist_ok=True)
    # Train under a temporary prefix so a crash never leaves a model that a
    # rerun would take for a finished one.
    tmp_prefix = model_prefix.with_name(model_prefix.name + ".tmp")
    try:
        spm.SentencePieceTrainer.train(
            input=[str(p) for p in inputs],
            model_prefix=str(tmp_prefix),
            vocab_size=cfg.vocab_size,
            model_type=cfg.model_type,
            character_coverage=cfg.character_coverage,
            input_sentence_size=cfg.input_sentence_size,
            shuffle_input_sentence=cfg.shuffle,
            num_threads=cfg.num_threads,
            minloglevel=1,
        )
    except RuntimeError as exc:
        # e.g. "Vocabulary size too high (8000). Please set it to a value <= 312."
        message = str(exc).splitlines()[-1] if str(exc) else type(exc).__name__
        raise RecipeError(f"SentencePiece training failed: {message}") from None
    for suffix in (".vocab", ".model"):
        Path(str(tmp_prefix) + suffix).replace(str(model_prefix) + suffix)
    return Path(str(model_prefix) + ".model")


def _batches(path: Path) -> Iterator[list[str]]:
    """Yield lists of lines (without newlines) of at most ``_BATCH`` items."""
    batch: list[str] = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            batch.append(line.rstrip("\n"))
            if len(batch) == _BATCH:
                yield batch
                batch = []
    if batch:
        yield batch


def encode_file(model: Path, src: Path, dst: Path, num_threads: int = 2) -> int:
    """Encode a text file to space-separated SentencePiece pieces.

    Args:
        model: SentencePiece ``.model`` file.
        src: Plain text, one sentence per line.
        dst: Output; line *i* holds the pieces of input line *i*.
        num_threads: Encoder threads.

    Returns:
        Number of lines written.
    """
    import sentencepiece as spm
    from tqdm import tqdm

    processor = spm.SentencePieceProcessor(model_file=str(model))
    written = 0
    total = count_lines(src)
    bar = tqdm(total=total, unit="lines", desc=f"encode {src.name}", disable=None,
               leave=False)
    with atomic_text(dst) as out, bar:
        for batch in _batches(src):
            encoded = processor.encode(batch, out_type=str, num_threads=num_threads)
            for pieces in encoded:
                out.write(" ".join(pieces) + "\n")
            written += len(batch)
            bar.update(len(batch))
    return written


def decode_line(line: str) -> str:
    """Turn a line of pieces back into text (no model needed)."""
    return "".join(line.split()).replace(SPIECE_UNDERLINE, " ").strip()


def binarize(
    spm_dir: Path,
    bin_dir: Path,
    langs: tuple[str, str] = ("de", "en"),
    splits: Sequence[str] = ("train", "valid", "test"),
    workers: int = 2,
    vocab: GivenVocab | None = None,
) -> None:
    """Binarize encoded splits with ``fairseq-preprocess`` (joined dictionary,
    built from the training split unless ``vocab`` gives the dictionaries).

    fairseq is run as ``sys.executable -m fairseq_cli.preprocess`` so that it
    works from a virtual environment whose ``bin`` is not on PATH. Output goes
    to a temporary directory that is renamed to ``bin_dir`` on success.

    Args:
        spm_dir: Directory with ``{split}.{lang}`` piece files.
        bin_dir: Destination (``dict.{lang}.txt``, ``{split}.{src}-{tgt}.*``).
        langs: Source and target language codes.
        splits: Split names; empty or missing splits other than train are
            left out (fairseq cannot binarize an empty file usefully).
        workers: fairseq worker processes.

    Raises:
        RecipeError: fairseq-preprocess failed.
    """
    src, tgt = langs
    tmp = bin_dir.with_name(bin_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", src,
           "--target-lang", tgt, "--destdir", str(tmp), "--workers", str(workers)]
    if vocab is None:
        cmd += ["--joined-dictionary"]
    elif vocab.joined:
        cmd += ["--joined-dictionary", "--srcdict", str(vocab.src_dict)]
    else:
        cmd += ["--srcdict", str(vocab.src_dict), "--tgtdict", str(vocab.tgt_dict)]
    for split in splits:
        files = [spm_dir / f"{split}.{lang}" for lang in langs]
        if split == "train" or all(f.exists() and f.stat().st_size for f in files):
            cmd += [f"--{split}pref", str(spm_dir / split)]
    LOG.info("running %s", " ".join(cmd[1:]))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RecipeError(f"fairseq-preprocess failed (exit {proc.returncode}): {tail}")
    shutil.rmtree(bin_dir, ignore_errors=True)
    tmp.replace(bin_dir)


def binarized_outputs(bin_dir: Path, langs: tuple[str, str] = ("de", "en"),
                      splits: Sequence[str] = ("train", "valid", "test")) -> list[Path]:
    """Files ``binarize`` is expected to create (used for reuse checks)."""
    src, tgt = langs
    out = [bin_dir / f"dict.{lang}.txt" for lang in langs]
    for split in splits:
        for lang in langs:
            out += [bin_dir / f"{split}.{src}-{tgt}.{lang}.{ext}"
                    for ext in ("bin", "idx")]
    return out


def spm_encode_binarize(chain, out: Path, spm_cfg: SpmConfig, langs: tuple[str, str],
                        workers: int, vocab: GivenVocab | None = None) -> None:
    """The recipe steps after the raw split: train SentencePiece on the raw
    training text (or take a given model), encode every split, binarize with
    fairseq-preprocess (with the given dictionaries, if any).

    Args:
        chain: the recipe's :class:`~nmt_specdec.data.steps.StepChain`.
        out: recipe output directory holding ``raw/``; gets ``spm.model``,
            ``spm/`` and ``bin/``.
        spm_cfg: SentencePiece settings (unused when ``vocab`` is given).
        langs: (source, target) language suffixes.
        workers: threads/processes for encoding and binarizing.
        vocab: an existing model's SentencePiece model and dictionaries, so
            that the data fits that model (fairseq's ``--srcdict`` idea).
    """
    raw_dir, spm_dir, bin_dir = out / "raw", out / "spm", out / "bin"
    model = out / "spm.model"
    if vocab is None:
        chain.run("spm", asdict(spm_cfg), [model, out / "spm.vocab"],
                  lambda: train_spm([raw_dir / f"train.{lang}" for lang in langs],
                                    out / "spm", spm_cfg))
    else:
        chain.run("spm", {"given": vocab.stamp()}, [model],
                  lambda: _copy_atomic(vocab.spm_model, model))
    encoded = split_paths(spm_dir, langs)
    chain.run("encode", {}, encoded,
              lambda: [encode_file(model, raw_dir / p.name, p, workers) for p in encoded])
    chain.run("binarize", {"dicts": vocab.stamp() if vocab else None},
              binarized_outputs(bin_dir, langs),
              lambda: binarize(spm_dir, bin_dir, langs, workers=workers, vocab=vocab))


@dataclass(frozen=True)
class GivenVocab:
    """An existing model's vocabulary: SentencePiece model and dictionaries.

    Attributes:
        spm_model: SentencePiece ``.model`` file.
        src_dict: fairseq dictionary of the source side.
        tgt_dict: fairseq dictionary of the target side (the same file, or
            one with the same content, means a joined dictionary).
    """

    spm_model: Path
    src_dict: Path
    tgt_dict: Path

    @classmethod
    def from_flags(cls, model_dir: Path | None, spm_model: Path | None,
                   dict_path: Path | None, langs: tuple[str, str]) -> "GivenVocab | None":
        """``--model-dir`` or ``--spm-model`` + ``--dict``; None when neither is given.

        Raises:
            RecipeError: only one of ``--spm-model``/``--dict``, or a missing file.
        """
        if model_dir is not None:
            if spm_model is not None or dict_path is not None:
                raise RecipeError("--model-dir excludes --spm-model and --dict")
            vocab = cls(model_dir / "spm.model", model_dir / f"dict.{langs[0]}.txt",
                        model_dir / f"dict.{langs[1]}.txt")
        elif spm_model is None and dict_path is None:
            return None
        elif spm_model is None or dict_path is None:
            raise RecipeError("--spm-model and --dict go together (or use --model-dir)")
        else:
            vocab = cls(spm_model, dict_path, dict_path)
        for path in (vocab.spm_model, vocab.src_dict, vocab.tgt_dict):
            if not path.is_file():
                raise RecipeError(f"{path} not found")
        return vocab

    @property
    def joined(self) -> bool:
        """Whether one dictionary serves both sides."""
        return self.src_dict.read_bytes() == self.tgt_dict.read_bytes()

    def stamp(self) -> dict:
        """Step parameters: the files' content, so an edited file rebuilds."""
        return {"spm": file_sha256(self.spm_model), "src_dict": file_sha256(self.src_dict),
                "tgt_dict": file_sha256(self.tgt_dict)}


def vocab_note(vocab: GivenVocab | None, vocab_size: int) -> str:
    """A data card's sentence on where the vocabulary came from."""
    if vocab is None:
        return (f"Joint SentencePiece unigram model, vocabulary {vocab_size}, "
                "trained on train.de + train.en; binarized with fairseq-preprocess "
                "--joined-dictionary.")
    return (f"Vocabulary of an existing model: SentencePiece `{vocab.spm_model}` and "
            f"dictionaries `{vocab.src_dict}` / `{vocab.tgt_dict}` (sha256 in "
            "`.stamps/spm.json`, `.stamps/binarize.json`); binarized with "
            "fairseq-preprocess --srcdict.")




def _copy_atomic(src: Path, dst: Path) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dst)


def add_vocab_flags(parser) -> None:
    """The ``--model-dir`` / ``--spm-model`` / ``--dict`` flags of every recipe."""
    parser.add_argument("--model-dir", type=Path,
                        help="encode and binarize with this model's spm.model and "
                        "dict.{src,tgt}.txt instead of training a new vocabulary")
    parser.add_argument("--spm-model", type=Path,
                        help="an existing SentencePiece model (with --dict)")
    parser.add_argument("--dict", type=Path, dest="dict_path",
                        help="an existing joined fairseq dictionary (with --spm-model)")
