"""--deterministic: output bytes independent of input order; options it refuses.

That the replay really undoes what a batch does to plain decoding is tested in
``test_deterministic_replay.py``, on cases where the batch changes plain greedy
output (on a CPU the toy model's plain decodes rarely do, so comparing batchings
alone would pass with a replay that does nothing).
"""

from __future__ import annotations

import hashlib
import random

import pytest

from tests.helpers.fairseq_toy import PLUGINS_DIR, hypotheses, run_cli

pytestmark = pytest.mark.slow

DECODE = ("--user-dir", PLUGINS_DIR, "--task", "translation_specdec", "--source-lang", "src",
          "--target-lang", "tgt", "--cpu", "--beam", "1", "--deterministic",
          "--max-len-a", "1.2", "--max-len-b", "5")


@pytest.fixture(scope="module")
def toy(specdec_toy):
    """(data_bin, checkpoint, raw_dir) of the shared toy joint model (tests/conftest.py)."""
    return specdec_toy.data_bin, specdec_toy.checkpoint, specdec_toy.raw_dir


def _digest(hyps: dict) -> str:
    text = "".join(f"{i}\t{hyps[i]}\n" for i in sorted(hyps))
    return hashlib.sha256(text.encode()).hexdigest()


def test_interactive_shuffled_input_gives_same_bytes(toy):
    data_bin, ckpt, raw = toy
    lines = (raw / "test.src").read_text().splitlines()
    order = list(range(len(lines)))
    random.Random(0).shuffle(order)
    outputs = []
    for perm, batch in ((list(range(len(lines))), "1"), (order, "16")):
        stdin = "".join(lines[i] + "\n" for i in perm)
        out = run_cli("interactive", [data_bin, "--path", ckpt, *DECODE, "--spec-decoding",
                                      "--buffer-size", "64", "--batch-size", batch],
                      stdin=stdin).stdout
        hyps = hypotheses(out)
        assert len(hyps) == len(lines)
        restored = {perm[i]: hyps[i] for i in hyps}  # back to file order
        outputs.append(_digest(restored))
    assert outputs[0] == outputs[1]


def test_deterministic_rejects_relaxed_acceptance(toy):
    data_bin, ckpt, _ = toy
    proc = run_cli("generate", [data_bin, "--path", ckpt, "--gen-subset", "test", *DECODE,
                                "--spec-decoding", "--spec-beta", "3"], check=False)
    assert proc.returncode == 2
    assert "--deterministic needs --spec-beta 1" in proc.stderr
    assert "Traceback" not in proc.stderr
