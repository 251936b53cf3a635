"""fairseq-train killed mid-epoch (SIGINT, then SIGKILL) resumes without lost updates.

One chain of three tiny runs in the same ``--save-dir``:

1. killed with SIGINT a few updates after an interval checkpoint;
2. restarted: resumes from ``checkpoint_last.pt``, killed with SIGKILL;
3. restarted again and run to ``--max-update``.

Each restart must log ``num_updates`` from exactly the saved count + 1, with
no gap and no repeat, still inside the first epoch (the data iterator resumed
mid-epoch); and the updates it replays (those the killed run made after its
last checkpoint) must have exactly the logged loss of the killed run, i.e. the
same batches from the same weights. ``--log-format json --log-interval 1``
gives one JSON record per update.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

from nmt_specdec.checkpoint_safety import load_checkpoint
from tests.helpers.fairseq_toy import (
    PLUGINS_DIR,
    TINY_TRAIN_ARGS,
    TINY_TRANSFORMER_ARGS,
)

SAVE_EVERY = 5
# 500 toy pairs in batches of 16: about 32 updates per epoch, so every
# checkpoint below is mid-epoch.
RUN_ARGS = (
    *TINY_TRAIN_ARGS,
    *TINY_TRANSFORMER_ARGS,
    "--batch-size",
    "16",
    "--save-interval-updates",
    str(SAVE_EVERY),
    "--keep-interval-updates",
    "1",
    "--no-epoch-checkpoints",
    "--disable-validation",
    "--log-format",
    "json",
    "--log-interval",
    "1",
)


def _train(
    data: Path,
    save_dir: Path,
    max_update: int,
    kill_at: Optional[int] = None,
    sig: int = signal.SIGINT,
) -> Dict[int, dict]:
    """Runs fairseq-train; sends ``sig`` once update ``kill_at`` is logged.

    Returns:
        num_updates -> that update's logged ``train_inner`` record.
    """
    cmd = [
        sys.executable,
        "-m",
        "fairseq_cli.train",
        str(data),
        "--user-dir",
        str(PLUGINS_DIR),
        "--arch",
        "transformer",
        "--save-dir",
        str(save_dir),
        *RUN_ARGS,
        "--max-update",
        str(max_update),
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    records: Dict[int, dict] = {}
    tail = []
    # A shell starts background jobs with SIGINT ignored, and children inherit
    # that: give fairseq-train the default disposition so that SIGINT reaches it.
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = (tail + [line])[-40:]
            record = _train_inner(line)
            if record is None:
                continue
            update = int(record["num_updates"])
            assert update not in records, f"update {update} logged twice"
            records[update] = record
            if kill_at is not None and update >= kill_at:
                proc.send_signal(sig)
                proc.stdout.read()
                break
        code = proc.wait(timeout=120)
    if kill_at is None:
        assert code == 0, "".join(tail)
    else:
        assert code != 0, "the run finished before it could be killed"
    return records


def _train_inner(line: str) -> Optional[dict]:
    """The JSON record of a ``train_inner`` log line, else None."""
    if "| train_inner |" not in line:
        return None
    return json.loads(line.split("| train_inner |", 1)[1])


def _saved_position(save_dir: Path) -> tuple[int, int, int]:
    """(num_updates, epoch, iterations_in_epoch) of ``checkpoint_last.pt``."""
    state = load_checkpoint(save_dir / "checkpoint_last.pt")
    iterator = state["extra_state"]["train_iterator"]
    updates = int(state["optimizer_history"][-1]["num_updates"])
    return updates, int(iterator["epoch"]), int(iterator["iterations_in_epoch"])


def _assert_resumed(
    records: Dict[int, dict], saved: int, previous: Dict[int, dict]
) -> None:
    """Updates continue at ``saved`` + 1; replayed updates match the killed run."""
    updates = sorted(records)
    assert updates[0] == saved + 1
    assert updates == list(range(saved + 1, updates[-1] + 1))
    replayed = [u for u in updates if u in previous]
    assert replayed, "the killed run logged nothing after its last checkpoint"
    for update in replayed:
        assert records[update]["loss"] == previous[update]["loss"], update
        assert records[update]["epoch"] == previous[update]["epoch"] == 1


def test_train_resumes_after_sigint_and_sigkill(
    toy_data_bin: Path, tmp_path: Path
) -> None:
    save_dir = tmp_path / "ckpt"

    first = _train(
        toy_data_bin, save_dir, 1000, kill_at=2 * SAVE_EVERY - 2, sig=signal.SIGINT
    )
    assert sorted(first) == list(range(1, max(first) + 1))
    saved, epoch, position = _saved_position(save_dir)
    assert saved == SAVE_EVERY and epoch == 1 and position == SAVE_EVERY

    second = _train(
        toy_data_bin, save_dir, 1000, kill_at=3 * SAVE_EVERY - 2, sig=signal.SIGKILL
    )
    _assert_resumed(second, saved, first)
    saved, epoch, position = _saved_position(save_dir)
    assert saved == 2 * SAVE_EVERY and epoch == 1 and position == 2 * SAVE_EVERY

    final = 2 * SAVE_EVERY + 4
    third = _train(toy_data_bin, save_dir, final)
    _assert_resumed(third, saved, second)
    assert max(third) == final
    assert _saved_position(save_dir)[0] == final
