"""Run ``fairseq-train`` from a Hydra recipe file, resumably and with a stamp.

The hyper-parameters live in one place, the Hydra YAML under ``conf/`` (e.g.
``conf/cpu_tiny.yaml``, also usable with ``fairseq-hydra-train``). This module
turns such a file plus a few overrides into classic ``fairseq-train`` flags,
so a recipe runs with the same values from either command.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from nmt_specdec import logs
from nmt_specdec.data.steps import LOG, RecipeError, atomic_text

# Hydra groups whose ``_name`` becomes the flag on the left.
_NAME_FLAGS = {"task": "--task", "model": "--arch", "criterion": "--criterion",
               "optimizer": "--optimizer", "lr_scheduler": "--lr-scheduler"}
# Top-level keys that configure Hydra itself, not fairseq.
_HYDRA_KEYS = frozenset({"hydra", "defaults"})
SETTINGS_FILE = "recipe_settings.json"
INFO_FILE = "train_info.json"

_UPDATES = re.compile(r"\bnum_updates[ =](\d+)")
_VALID_LOSS = re.compile(r"valid on 'valid' subset.*?\| loss ([0-9.]+)")
_DONE = re.compile(r"done training in ([0-9.]+) seconds")
_RESUMED = re.compile(r"Loaded checkpoint .*\(epoch \d+ @ (\d+) updates\)")


def load_recipe(path: Path) -> dict:
    """Read a Hydra recipe YAML into nested dicts.

    Raises:
        RecipeError: Missing or unreadable file.
    """
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise RecipeError(f"cannot read training recipe {path}: {exc}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"training recipe {path} is not a mapping of groups")
    return data


def apply_overrides(recipe: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict:
    """Return a copy of ``recipe`` with ``{"group.key": value}`` overrides set."""
    out = {group: dict(values or {}) for group, values in recipe.items()}
    for dotted, value in overrides.items():
        group, _, key = dotted.partition(".")
        if not key:
            raise RecipeError(f"override {dotted!r} must look like group.key")
        out.setdefault(group, {})[key] = value
    return out


def _flag_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def recipe_to_flags(recipe: Mapping[str, Any]) -> list[str]:
    """Translate a recipe into ``fairseq-train`` arguments.

    ``task.data`` becomes the positional data argument, each group's ``_name``
    its selector flag (``model._name`` -> ``--arch``), ``key: true`` a bare
    ``--key`` and ``key: false``/``null`` nothing (fairseq's defaults). The
    ``hydra`` group (Hydra's own settings) is not for fairseq and is skipped.

    Example:
        ``{"optimization": {"lr": [0.001]}}`` -> ``["--lr", "0.001"]``.
    """
    data = (recipe.get("task") or {}).get("data")
    if data in (None, "???"):
        raise RecipeError("the training recipe needs task.data "
                          "(the binarized data directory)")
    flags = [str(data)]
    for group, values in recipe.items():
        if group in _HYDRA_KEYS:
            continue
        for key, value in (values or {}).items():
            if isinstance(value, dict):
                raise RecipeError(f"recipe key {group}.{key} is nested; fairseq "
                                  "flags are flat")
            if key == "_name":
                if group not in _NAME_FLAGS:
                    raise RecipeError(f"recipe group {group!r} cannot have a _name")
                flags += [_NAME_FLAGS[group], str(value)]
            elif (group, key) == ("task", "data") or value is None or value is False:
                continue
            elif value is True:
                flags.append("--" + key.replace("_", "-"))
            else:
                flags += ["--" + key.replace("_", "-"), _flag_value(value)]
    return flags


@dataclass(frozen=True)
class TrainInfo:
    """What a finished training run reports.

    Attributes:
        checkpoint: The last checkpoint (saved when the time budget ran out).
        train_seconds: Training time of this ``fairseq-train`` process (a resumed
            run's earlier processes not included).
        updates: Optimizer updates of the last checkpoint, from the start.
        valid_loss: Last validation loss (base 2), None if never validated.
        wall_seconds: Wall time of the ``fairseq-train`` process.
        resumed_at: Updates of the checkpoint this process resumed from (0: none).
    """

    checkpoint: str
    train_seconds: float
    updates: int
    valid_loss: float | None
    wall_seconds: float
    resumed_at: int = 0

    @property
    def updates_per_second(self) -> float:
        """This process's updates over its training time."""
        return (self.updates - self.resumed_at) / max(self.train_seconds, 1e-9)


def parse_train_log(text: str) -> tuple[int, float | None, float | None, int]:
    """Updates, last valid loss, training seconds and the updates of the
    checkpoint it resumed from (0: none), from one fairseq-train process's log."""
    updates = [int(m) for m in _UPDATES.findall(text)]
    losses = [float(m) for m in _VALID_LOSS.findall(text)]
    done = _DONE.findall(text)
    resumed = [int(m) for m in _RESUMED.findall(text)]
    return (max(updates + resumed, default=0), losses[-1] if losses else None,
            float(done[-1]) if done else None, resumed[0] if resumed else 0)


def train(flags: Sequence[str], save_dir: Path, log_path: Path, threads: int,
          cwd: Path) -> TrainInfo:
    """Run ``fairseq-train`` (resuming an interrupted run with the same flags).

    A run whose ``recipe_settings.json`` differs from ``flags`` is wiped first:
    fairseq would otherwise resume a checkpoint trained with other settings.
    fairseq's output goes to ``log_path``; the terminal gets its progress (each
    epoch's summary; every line with ``--verbose``).

    Args:
        flags: ``fairseq-train`` arguments (must include ``--save-dir save_dir``).
        save_dir: Checkpoint directory.
        log_path: Where the training log is appended.
        threads: ``OMP_NUM_THREADS`` of the training process.
        cwd: Working directory (relative paths in ``flags`` resolve here).

    Returns:
        The run's TrainInfo (also written to ``save_dir/train_info.json``).
    """
    settings = save_dir / SETTINGS_FILE
    wanted = _training_settings(flags)
    if save_dir.exists() and _stored_settings(settings) != wanted:
        LOG.info("settings changed: starting training afresh in %s", save_dir)
        shutil.rmtree(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps(wanted, indent=1))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "fairseq_cli.train", *flags]
    LOG.info("running fairseq-train %s (its log: %s)", " ".join(flags), log_path)
    start = time.monotonic()
    text = _run_teed(cmd, env, cwd, log_path)
    updates, valid_loss, seconds, resumed_at = parse_train_log(text)
    checkpoint = save_dir / "checkpoint_last.pt"
    if not checkpoint.is_file():
        raise RecipeError(f"fairseq-train wrote no {checkpoint}; see {log_path}")
    info = TrainInfo(str(checkpoint), seconds or 0.0, updates, valid_loss,
                     time.monotonic() - start, resumed_at)
    with atomic_text(save_dir / INFO_FILE) as handle:
        json.dump(asdict(info), handle, indent=1)
    return info


# Flags (each with one value) that do not change what training computes, so a
# run rerun with another value continues: a larger time budget (fairseq counts
# cumulative training time), and how often decoding runs the draft head's
# refinement (training runs it once, teacher-forced).
_NOT_TRAINING = ("--stop-time-hours", "--draft-refine-steps")


def _training_settings(flags: Sequence[str]) -> list[str]:
    out = list(flags)
    for flag in _NOT_TRAINING:
        if flag in out:
            at = out.index(flag)
            del out[at: at + 2]
    return out


def _stored_settings(path: Path) -> Optional[list[str]]:
    """The training settings a run in progress was started with (None: none)."""
    try:
        return _training_settings(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def read_train_info(save_dir: Path) -> TrainInfo:
    """The TrainInfo a previous ``train`` call stored."""
    return TrainInfo(**json.loads((save_dir / INFO_FILE).read_text(encoding="utf-8")))


# fairseq-train's lines shown without --verbose: one per epoch and the end.
_PROGRESS = re.compile(r"\| (train|valid) \| epoch |done training in ")


def _run_teed(cmd: list[str], env: dict, cwd: Path, log_path: Path) -> str:
    """Run ``cmd``, appending its merged output to ``log_path`` and echoing its
    progress (every line with ``--verbose``; else each epoch's summary and the end)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    with open(log_path, "a", encoding="utf-8", buffering=1) as log, subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, bufsize=1,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if logs.verbose() or _PROGRESS.search(line):
                sys.stdout.write(line)
                sys.stdout.flush()
            log.write(line)
            lines.append(line)
    if proc.returncode != 0:
        tail = "".join(lines[-3:]).strip().splitlines() or ["no output"]
        raise RecipeError(f"fairseq-train failed (exit {proc.returncode}): {tail[-1]} "
                          f"(full log: {log_path})")
    return "".join(lines)
