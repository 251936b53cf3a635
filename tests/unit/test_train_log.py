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
