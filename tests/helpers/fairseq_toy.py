"""Toy parallel data and tiny fairseq runs for tests.

Everything here drives fairseq through its CLIs in a subprocess, exactly as a
user would, but as ``python -m fairseq_cli.<module>`` with this interpreter so
that the virtualenv need not be on ``PATH``.

Typical use::

    raw = make_toy_data(tmp_path / "raw", n=500, seed=0)
    data_bin = binarize(raw, tmp_path / "bin")
    ckpt = train_tiny(data_bin, tmp_path / "ckpt")
    out = run_cli("generate", [str(data_bin), "--path", str(ckpt), ...])

The helpers are general on purpose (architecture, task and extra arguments are
parameters) so that the SpecDec tests can train their joint model with them.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]
PLUGINS_DIR = REPO_ROOT / "fairseq_plugins"

# Toy sentences are strings over this alphabet; the target is the reversed
# source, which a 1-layer Transformer learns a little of within 20 updates.
TOY_ALPHABET = tuple("abcdefghijklmnop")
DEFAULT_SPLITS = {"train": 1.0, "valid": 0.1, "test": 0.1}

# A Transformer small enough that 20 CPU updates take a few seconds.
TINY_TRANSFORMER_ARGS: tuple[str, ...] = (
    "--encoder-layers", "1", "--decoder-layers", "1",
    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
)

# fairseq's batch_by_size (fairseq/data/data_utils.py) rounds batches down to a
# multiple of --required-batch-size-multiple (default 8) and then drops the last
# batch if its size is still not a multiple: 50 test sentences with
# --batch-size 64 give 48 hypotheses in fairseq-generate, and validation during
# training sees 96 of 100 sentences. (fairseq-interactive passes no multiple.)
# Pass this to generate/validate whenever every sentence counts.
EXACT_BATCHING: tuple[str, ...] = ("--required-batch-size-multiple", "1")

# Optimisation settings for a tiny CPU run; disk-heavy extras are switched off.
TINY_TRAIN_ARGS: tuple[str, ...] = (
    "--cpu", "--seed", "1", "--num-workers", "0",
    "--optimizer", "adam", "--lr", "5e-3", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "5",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--max-tokens", "1024", "--max-epoch", "1000",
    "--log-format", "simple", "--log-interval", "10",
    "--no-epoch-checkpoints", "--no-progress-bar",
)


TOY_TASKS = ("reverse", "copy")


def toy_pair(
    rng: random.Random,
    min_len: int = 3,
    max_len: int = 10,
    task: str = "reverse",
    alphabet: Sequence[str] = TOY_ALPHABET,
) -> tuple[str, str]:
    """Draws one toy sentence pair: random symbols and their reversal (or copy).

    Args:
        rng: Source of randomness (seeded by the caller for reproducibility).
        min_len: Shortest source length in tokens.
        max_len: Longest source length in tokens.
        task: ``"reverse"`` (target = reversed source) or ``"copy"``.
        alphabet: Symbols to draw from.

    Returns:
        ``(source, target)`` as space-separated token strings.
    """
    if task not in TOY_TASKS:
        raise ValueError(f"task must be one of {TOY_TASKS}, got {task!r}")
    tokens = [rng.choice(alphabet) for _ in range(rng.randint(min_len, max_len))]
    target = tokens if task == "copy" else tokens[::-1]
    return " ".join(tokens), " ".join(target)


def make_toy_data(
    out_dir: Path,
    n: int = 500,
    seed: int = 0,
    src: str = "src",
    tgt: str = "tgt",
    splits: Mapping[str, float] | None = None,
    task: str = "reverse",
    alphabet: Sequence[str] = TOY_ALPHABET,
) -> Path:
    """Writes raw toy parallel text as ``{split}.{src}`` / ``{split}.{tgt}``.

    Args:
        out_dir: Directory to create and fill.
        n: Number of training pairs; other splits are sized relative to it.
        seed: RNG seed; the same seed always gives the same files.
        src: Source language suffix.
        tgt: Target language suffix.
        splits: Split name -> size as a fraction of ``n`` (at least 1 pair).
        task: ``"reverse"`` or ``"copy"`` (see :func:`toy_pair`).
        alphabet: Symbols to draw from.

    Returns:
        ``out_dir``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for split, frac in (splits or DEFAULT_SPLITS).items():
        pairs = [toy_pair(rng, task=task, alphabet=alphabet)
                 for _ in range(max(1, round(n * frac)))]
        (out_dir / f"{split}.{src}").write_text("".join(s + "\n" for s, _ in pairs))
        (out_dir / f"{split}.{tgt}").write_text("".join(t + "\n" for _, t in pairs))
    return out_dir


def run_cli(
    module: str,
    args: Sequence[str],
    *,
    stdin: str | None = None,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m fairseq_cli.<module> *args`` with this interpreter.

    Args:
        module: fairseq_cli module: preprocess, train, hydra_train, generate,
            interactive, validate, score, eval_lm.
        args: Command-line arguments.
        stdin: Text fed to standard input (``None``: empty input).
        check: Raise if the command exits non-zero; the error shows its output.
        env: Full environment to use (default: this process's environment,
            with ``OMP_NUM_THREADS=1`` unless it is set: toy models only lose
            time to thread start-up, and tests share the cores).
        cwd: Working directory (default: the current one).
        timeout: Seconds before the command is killed.

    Returns:
        The completed process, with text ``stdout`` and ``stderr``.

    Raises:
        RuntimeError: ``check`` is set and the command failed.
    """
    cmd = [sys.executable, "-m", f"fairseq_cli.{module}", *map(str, args)]
    proc = subprocess.run(
        cmd, input=stdin or "", capture_output=True, text=True,
        env=dict(env) if env is not None else default_env(), cwd=cwd, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    return proc


def default_env() -> dict[str, str]:
    """This process's environment, with ``OMP_NUM_THREADS`` defaulting to 1."""
    return {"OMP_NUM_THREADS": "1", **os.environ}


def binarize(
    raw_dir: Path,
    dest_dir: Path,
    src: str = "src",
    tgt: str = "tgt",
    splits: Sequence[str] = ("train", "valid", "test"),
    joined_dictionary: bool = True,
    extra_args: Sequence[str] = (),
) -> Path:
    """Binarizes raw parallel text with ``fairseq-preprocess``.

    Args:
        raw_dir: Directory holding ``{split}.{src}`` and ``{split}.{tgt}``.
        dest_dir: Output data-bin directory.
        src: Source language suffix.
        tgt: Target language suffix.
        splits: Splits to binarize; must include ``train``.
        joined_dictionary: Share one dictionary between both sides.
        extra_args: Further ``fairseq-preprocess`` arguments.

    Returns:
        ``dest_dir``.
    """
    raw = Path(raw_dir)
    args = ["--source-lang", src, "--target-lang", tgt, "--destdir", dest_dir, "--workers", "1"]
    for split in splits:
        flag = "--trainpref" if split == "train" else f"--{split}pref"
        args += [flag, raw / split]
    if joined_dictionary:
        args.append("--joined-dictionary")
    run_cli("preprocess", [*args, *extra_args])
    return Path(dest_dir)


def train_tiny(
    data_bin: Path,
    save_dir: Path,
    arch: str = "transformer",
    max_update: int = 20,
    extra_args: Sequence[str] = (),
    model_args: Sequence[str] | None = None,
    user_dir: Path | None = PLUGINS_DIR,
) -> Path:
    """Trains a tiny model on CPU with ``fairseq-train``.

    Args:
        data_bin: Binarized data directory (from :func:`binarize`).
        save_dir: Checkpoint directory.
        arch: Registered fairseq architecture.
        max_update: Number of optimizer updates.
        extra_args: Further ``fairseq-train`` arguments (e.g. ``--task``,
            ``--criterion``); later flags override the defaults here.
        model_args: Architecture size flags (default: a tiny Transformer).
        user_dir: ``--user-dir`` to load (default: this repo's plugins;
            ``None``: stock fairseq only).

    Returns:
        Path of ``checkpoint_last.pt``; the run's output is in ``train.log``
        beside it.
    """
    args = [
        data_bin, "--arch", arch, "--save-dir", save_dir, "--max-update", str(max_update),
        *TINY_TRAIN_ARGS,
        *(TINY_TRANSFORMER_ARGS if model_args is None else model_args),
    ]
    if user_dir is not None:
        args += ["--user-dir", user_dir]
    proc = run_cli("train", [*args, *extra_args])
    Path(save_dir, "train.log").write_text(proc.stdout + proc.stderr)
    ckpt = Path(save_dir) / "checkpoint_last.pt"
    if not ckpt.is_file():
        raise RuntimeError(f"fairseq-train wrote no {ckpt}")
    return ckpt


def hypotheses(output: str) -> dict[int, str]:
    """Parses ``H-<id>\\t<score>\\t<text>`` lines of generate/interactive output.

    Args:
        output: Standard output of ``fairseq-generate`` or ``fairseq-interactive``.

    Returns:
        Sentence id -> hypothesis text (best hypothesis per id).
    """
    hyps: dict[int, str] = {}
    for line in output.splitlines():
        if line.startswith("H-"):
            head, _score, *text = line.split("\t")
            hyps.setdefault(int(head[2:]), text[0] if text else "")
    return hyps


def json_log_records(output: str) -> list[tuple[str, dict]]:
    """Parses the stat lines of a ``--log-format json`` fairseq run.

    Args:
        output: The run's stdout and stderr (``... | INFO | train_inner | {...}``).

    Returns:
        ``(tag, stats)`` per line in order; tag is ``train_inner``, ``train``,
        ``valid`` etc. and values are floats where they parse as numbers.
    """
    records = []
    for line in output.splitlines():
        match = re.search(r"\| (\w+) \| (\{.*\})\s*$", line)
        if not match:
            continue
        try:
            stats = json.loads(match.group(2))
        except json.JSONDecodeError:
            continue
        records.append((match.group(1), {k: _number(v) for k, v in stats.items()}))
    return records


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return value
