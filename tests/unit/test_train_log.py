"""fairseq-train's log file is written as the run goes (:mod:`nmt_specdec.workflows.train_recipe`).

A long head training is followed with ``tail -f OUT/train.log``: each line is in
the file when fairseq prints it, not when an 8 KiB buffer fills or the run ends.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from nmt_specdec.workflows.train_recipe import _run_teed

CHILD = ("import os, sys, time\n"
         "print('update 25 done', flush=True)\n"
         "deadline = time.monotonic() + 30\n"
         "while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:\n"
         "    time.sleep(0.05)\n"
         "print('finished')\n")


def test_each_line_reaches_the_log_while_the_run_goes_on(tmp_path: Path) -> None:
    log, release = tmp_path / "train.log", tmp_path / "release"
    outputs: list[str] = []
    runner = threading.Thread(target=lambda: outputs.append(
        _run_teed([sys.executable, "-c", CHILD, str(release)], dict(os.environ), tmp_path, log)))
    runner.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "update 25" not in (
            log.read_text() if log.exists() else ""):
        time.sleep(0.05)
    seen_while_running = log.exists() and "update 25 done" in log.read_text()
    release.touch()
    runner.join(timeout=60)
    assert seen_while_running, "the log showed nothing while fairseq-train ran"
    assert outputs and outputs[0].splitlines() == ["update 25 done", "finished"]
    assert log.read_text().splitlines() == ["update 25 done", "finished"]


def _fairseq_log(resumed: bool) -> str:
    """fairseq-train's lines that the recipe reads, in its format."""
    return ("I | fairseq.trainer | Loaded checkpoint run/checkpoint_last.pt (epoch 3 @ 400 updates)\n"
            if resumed else "") + (
        "I | train_inner | epoch 003:     25 / 165 loss=3.6, num_updates=425, lr=0.001\n"
        "I | valid | epoch 003 | valid on 'valid' subset | loss 5.9 | num_updates 450\n"
        "I | fairseq_cli.train | done training in 100.0 seconds\n")


def test_a_resumed_run_counts_its_own_updates_per_second() -> None:
    from nmt_specdec.workflows.train_recipe import TrainInfo, parse_train_log

    for resumed, start in ((True, 400), (False, 0)):
        updates, loss, seconds, resumed_at = parse_train_log(_fairseq_log(resumed))
        assert (updates, loss, seconds, resumed_at) == (450, 5.9, 100.0, start)
        info = TrainInfo("run/checkpoint_last.pt", seconds, updates, loss, 120.0, resumed_at)
        assert info.updates_per_second == (450 - start) / 100.0
