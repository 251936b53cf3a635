"""SpecDec test helpers: tiny random models, stub drafters, a trained toy model.

Built on :mod:`tests.helpers.fairseq_toy` (toy data, binarize, fairseq CLIs).

* :func:`random_specdec_model` builds a random-weight ``specdec_transformer`` in
  this process (no training, well under a second) for generator tests.
* :class:`OracleDrafter` / :class:`WrongDrafter` / :class:`PadDrafter` implement
  :class:`nmt_specdec.decoding.drafters.Drafter` from a known reference output.
* :func:`train_specdec_toy` trains the joint model with the real
  ``fairseq-train`` CLI on a copy task (600 CPU updates, ~50 s of CPU),
  for tests that need a model that has learned something (draft accuracy, CLI
  parity, lossless decoding). ``tests/conftest.py`` shares one per session as
  the ``specdec_toy`` fixture.

Typical use::

    run_cli("generate", [toy.data_bin, "--path", toy.checkpoint, *toy.decode_args()])
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Tuple

import torch

from nmt_specdec.decoding.drafters import Drafter, DraftRequest
from tests.helpers.fairseq_toy import (
    PLUGINS_DIR,
    binarize,
    json_log_records,
    make_toy_data,
    run_cli,
)

# ----------------------------------------------------------------- random model

TOY_SYMBOLS = tuple("abcdefghijklmnopqrst")  # 20 words after fairseq's 4 specials

RANDOM_MODEL_ARGS: Tuple[str, ...] = (
    "--arch", "specdec_transformer_tiny",
    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
    "--encoder-layers", "2", "--decoder-layers", "2", "--draft-layers", "1",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--draft-block-size", "4", "--dropout", "0",
)


def write_toy_dictionaries(workdir: Path, symbols: Sequence[str] = TOY_SYMBOLS):
    """The toy dictionary, saved as ``dict.src.txt`` and ``dict.tgt.txt`` in ``workdir``."""
    from fairseq.data import Dictionary

    workdir.mkdir(parents=True, exist_ok=True)
    dictionary = Dictionary()
    for symbol in symbols:
        dictionary.add_symbol(symbol)
    for side in ("src", "tgt"):
        dictionary.save(str(workdir / f"dict.{side}.txt"))
    return dictionary


def random_specdec_model(workdir: Path, *, seed: int = 2, eos_boost: float = 0.5,
                         extra_args: Sequence[str] = ()):
    """A random-weight ``specdec_transformer`` (d=32, 2+2 layers) and its task.

    A random decoder rarely predicts EOS, so its greedy outputs would all run to
    the max length; ``eos_boost`` scales up the EOS row of the output layer so
    that, for the default seed, some toy sentences end early and some do not.

    Args:
        workdir: where the (shared src/tgt) dictionary files are written.
        seed: torch seed for the weights.
        eos_boost: the EOS output row is multiplied by ``1 + eos_boost``.
        extra_args: further task/model flags (e.g. ``--spec-decoding``).

    Returns:
        ``(task, model)``; the model is in eval mode on the CPU.
    """
    import fairseq_plugins  # noqa: F401  (registers the task and model)
    from fairseq import options, tasks

    dictionary = write_toy_dictionaries(Path(workdir))
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(workdir), "--task", "translation_specdec", "-s", "src", "-t", "tgt",
        "--criterion", "specdec_joint_loss", "--cpu", *RANDOM_MODEL_ARGS, *extra_args,
    ])
    task = tasks.setup_task(args)
    torch.manual_seed(seed)
    model = task.build_model(args).eval()
    with torch.no_grad():
        model.decoder.output_projection.weight[dictionary.eos()] *= 1.0 + eos_boost
    return task, model


def random_fairseq_model(workdir: Path, flags: Sequence[str], seed: int,
                         symbols: Sequence[str] = TOY_SYMBOLS, noise: float = 0.2,
                         eos_scale: float = 1.6):
    """A random fairseq model built by its task from command-line ``flags`` (task,
    arch, sizes), every parameter perturbed by ``noise`` standard deviations (so
    that norms and positions matter) and the EOS output row scaled by
    ``eos_scale`` (so that some sentences end before the length limit).
    Returns ``(task, model)``, eval mode, CPU."""
    import fairseq_plugins  # noqa: F401  (registers translation_specdec)
    from fairseq import options, tasks

    dictionary = write_toy_dictionaries(Path(workdir), symbols)
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(workdir), "-s", "src", "-t", "tgt",
                                                "--cpu", *flags])
    task = tasks.setup_task(args)
    torch.manual_seed(seed)
    model = task.build_model(args).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(noise * torch.randn(param.shape, generator=g))
        if getattr(model.decoder, "output_projection", None) is not None:
            model.decoder.output_projection.weight[dictionary.eos()] *= eos_scale
    return task, model


def generation_config(**fields):
    """fairseq's GenerationConfig at beam 1 with ``fields`` set."""
    from fairseq.dataclass.configs import GenerationConfig

    config = GenerationConfig()
    config.beam = 1
    for name, value in fields.items():
        setattr(config, name, value)
    return config


def source_batch(dictionary, lengths: Sequence[int], seed: int = 0) -> dict:
    """A fairseq sample of random sources, left-padded as fairseq's translation task.

    Args:
        dictionary: source dictionary.
        lengths: words per sentence (EOS is appended).
        seed: RNG seed for the words.

    Returns:
        ``{"id", "net_input": {"src_tokens", "src_lengths"}}`` with B = len(lengths).
    """
    g = torch.Generator().manual_seed(seed)
    width = max(lengths) + 1
    src = torch.full((len(lengths), width), dictionary.pad())
    for b, n in enumerate(lengths):
        src[b, width - n - 1 : width - 1] = torch.randint(
            dictionary.nspecial, len(dictionary), (n,), generator=g)
        src[b, -1] = dictionary.eos()
    return {
        "id": torch.arange(len(lengths)),
        "net_input": {"src_tokens": src, "src_lengths": src.ne(dictionary.pad()).sum(1)},
    }


def select_rows(sample: dict, rows: Sequence[int]) -> dict:
    """The sub-batch of ``rows``, with left padding trimmed to the new width."""
    src = sample["net_input"]["src_tokens"][list(rows)]
    lengths = sample["net_input"]["src_lengths"][list(rows)]
    src = src[:, src.size(1) - int(lengths.max()):]
    return {"id": sample["id"][list(rows)],
            "net_input": {"src_tokens": src, "src_lengths": lengths}}


# --------------------------------------------------------------- stub drafters


def committed_lengths(request: DraftRequest, pad: int) -> torch.Tensor:
    """(B,) output tokens committed so far: the prefix minus padding and BOS."""
    return request.prefix.ne(pad).sum(dim=1) - 1


class OracleDrafter(Drafter):
    """Proposes the next K tokens of a known reference output (e.g. greedy).

    Args:
        references: per input row, the expected output tokens (EOS included).
        pad: padding id, proposed past the end of a reference.
    """

    def __init__(self, references: Sequence[Sequence[int]], pad: int):
        self.references = [list(map(int, ref)) for ref in references]
        self.pad = pad
        self.calls = 0

    def next_tokens(self, row: int, committed: int, k: int) -> List[int]:
        ref = self.references[row]
        return (ref[committed : committed + k] + [self.pad] * k)[:k]

    def propose(self, request: DraftRequest) -> torch.Tensor:
        self.calls += 1
        committed = committed_lengths(request, self.pad).tolist()
        rows = [self.next_tokens(int(r), c, request.num_slots)
                for r, c in zip(request.rows.tolist(), committed)]
        return torch.tensor(rows, dtype=torch.long).view(len(rows), request.num_slots)


class WrongDrafter(OracleDrafter):
    """Slot 1 is a real word that is *not* the reference's next token; slots 2..K
    are the reference's true continuation, which must not be accepted after the
    slot-1 rejection."""

    def __init__(self, references, pad: int, first_word: int, vocab_size: int):
        super().__init__(references, pad)
        self.words = list(range(first_word, vocab_size))

    def next_tokens(self, row: int, committed: int, k: int) -> List[int]:
        if k == 0:
            return []
        right = super().next_tokens(row, committed, 1)[0]
        wrong = next(w for w in self.words if w != right)
        return [wrong] + super().next_tokens(row, committed + 1, k - 1)


class PadDrafter(Drafter):
    """Always proposes ``pad``, which the verifier never emits (its score is -inf)."""

    def __init__(self, pad: int):
        self.pad = pad

    def propose(self, request: DraftRequest) -> torch.Tensor:
        return request.prefix.new_full((request.prefix.size(0), request.num_slots), self.pad)


# ------------------------------------------------------------ trained toy model

# Copy task over 12 symbols: a 2+2-layer d=64 model learns it within ~150
# updates, with the draft head's slot-1 accuracy near 100% on held-out data.
SPECDEC_TOY_ALPHABET = tuple("abcdefghijkl")
SPECDEC_TOY_SPLITS = {"train": 1.0, "valid": 100 / 3000, "test": 200 / 3000}
SPECDEC_TOY_PAIRS = 3000
SPECDEC_TOY_K = 4
SPECDEC_TOY_UPDATES = 600

SPECDEC_TOY_MODEL_ARGS: Tuple[str, ...] = (
    "--arch", "specdec_transformer_tiny",
    "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",
    "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128",
    "--encoder-layers", "2", "--decoder-layers", "2", "--draft-layers", "1",
    "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
    "--draft-block-size", str(SPECDEC_TOY_K), "--dropout", "0", "--share-all-embeddings",
)

# Joint training as a user would run it; only the final checkpoint is written
# and validation runs once at the end (fairseq validates when it stops).
SPECDEC_TOY_TRAIN_ARGS: Tuple[str, ...] = (
    "--user-dir", str(PLUGINS_DIR), "--task", "translation_specdec", "-s", "src", "-t", "tgt",
    "--criterion", "specdec_joint_loss", "--label-smoothing", "0.1",
    "--cpu", "--seed", "1", "--num-workers", "0",
    "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "5e-3",
    "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "50",
    "--max-tokens", "1024", "--max-epoch", "1000",
    "--save-interval", "1000", "--validate-interval", "1000", "--no-epoch-checkpoints",
    "--log-format", "json", "--log-interval", "25", "--no-progress-bar",
)


@dataclass(frozen=True)
class SpecDecToy:
    """A trained toy ``specdec_transformer`` (read-only; copy to continue training).

    Attributes:
        raw_dir: raw text, ``{train,valid,test}.{src,tgt}`` (target = source).
        data_bin: binarized data (joined dictionary).
        checkpoint: ``checkpoint_last.pt``; its directory holds ``train.log``.
        train_log: fairseq-train's stdout + stderr (``--log-format json``).
        train_cpu_seconds: CPU time (user + system) the fairseq-train process
            used: unlike its wall time, it does not grow when other jobs share
            the cores.
    """

    raw_dir: Path
    data_bin: Path
    checkpoint: Path
    train_log: str
    train_cpu_seconds: float

    def records(self, tag: str) -> List[dict]:
        """The JSON stat lines of one kind (``train_inner``, ``valid``, ...)."""
        return [stats for t, stats in json_log_records(self.train_log) if t == tag]

    def test_lines(self, side: str = "src") -> List[str]:
        return (self.raw_dir / f"test.{side}").read_text().splitlines()

    def decode_args(self, k: int = SPECDEC_TOY_K) -> List[str]:
        """Flags for generate/interactive to decode this model with SpecDec."""
        return ["--user-dir", str(PLUGINS_DIR), "--task", "translation_specdec",
                "-s", "src", "-t", "tgt", "--cpu", "--spec-decoding", "--spec-k", str(k)]


def train_specdec_args(data_bin: Path, save_dir: Path, max_update: int) -> List[str]:
    """``fairseq-train`` arguments of the toy SpecDec run."""
    return [str(data_bin), "--save-dir", str(save_dir), "--max-update", str(max_update),
            *SPECDEC_TOY_TRAIN_ARGS, *SPECDEC_TOY_MODEL_ARGS]


def train_specdec_toy(workdir: Path, max_update: int = SPECDEC_TOY_UPDATES) -> SpecDecToy:
    """Makes copy-task data, binarizes it and trains the joint model on it.

    Args:
        workdir: empty directory for ``raw/``, ``data-bin/`` and ``checkpoints/``.
        max_update: optimizer updates.

    Returns:
        The :class:`SpecDecToy`.
    """
    workdir = Path(workdir)
    raw = make_toy_data(workdir / "raw", n=SPECDEC_TOY_PAIRS, seed=3,
                        splits=SPECDEC_TOY_SPLITS, task="copy",
                        alphabet=SPECDEC_TOY_ALPHABET)
    data_bin = binarize(raw, workdir / "data-bin")
    save_dir = workdir / "checkpoints"
    before = _children_cpu_seconds()
    proc = run_cli("train", train_specdec_args(data_bin, save_dir, max_update))
    cpu = _children_cpu_seconds() - before
    log = proc.stdout + proc.stderr
    (save_dir / "train.log").write_text(log)
    return SpecDecToy(raw, data_bin, save_dir / "checkpoint_last.pt", log, cpu)


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
