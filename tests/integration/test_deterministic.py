"""--deterministic: output bytes independent of batch size, --max-tokens and order.

The shared toy joint model's decodes through fairseq-generate /
fairseq-interactive with different batchings must hash identically, and the
in-process property test checks arbitrary batch compositions.
"""

from __future__ import annotations

import hashlib
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


SPEC_BATCHINGS = [("--batch-size", "1"), ("--batch-size", "7"), ("--batch-size", "32"),
                  ("--batch-size", "128"), ("--max-tokens", "60"),
                  ("--batch-size", "32")]  # the last one repeats a run
# Stock greedy shares the replay; its two extremes are enough.
STOCK_BATCHINGS = [("--batch-size", "1"), ("--batch-size", "128")]


@pytest.mark.parametrize("spec", [True, False], ids=["specdec", "stock-greedy"])
def test_generate_output_is_identical_across_batchings(toy, spec):
    data_bin, ckpt, raw = toy
    n_test = len((raw / "test.src").read_text().splitlines())
    extra = ("--spec-decoding",) if spec else ()
    batchings = SPEC_BATCHINGS if spec else STOCK_BATCHINGS
    digests = {}
    for batching in batchings:
        out = run_cli("generate", [data_bin, "--path", ckpt, "--gen-subset", "test",
                                   *DECODE, *extra, *batching]).stdout
        hyps = hypotheses(out)
        assert len(hyps) == n_test, batching
        digests[" ".join(batching)] = _digest(hyps)
    assert len(set(digests.values())) == 1, digests


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


@pytest.fixture(scope="module")
def loaded(toy):
    import fairseq_plugins  # noqa: F401  (safe loading, task registration)
    from fairseq import checkpoint_utils

    data_bin, ckpt, _ = toy
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(ckpt)], arg_overrides={"data": str(data_bin), "spec_decoding": True,
                                    "deterministic": True})
    task.load_dataset("test")
    return models[0].eval(), cfg, task


def _batch(task, indices):
    dataset = task.dataset("test")
    return dataset.collater([dataset[i] for i in indices])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_batch_composition_gives_the_same_tokens(loaded, data):
    model, cfg, task = loaded
    from fairseq.dataclass.configs import GenerationConfig

    generator = task.build_generator([model], GenerationConfig(beam=1, max_len_a=1.2, max_len_b=5))
    size = len(task.dataset("test"))
    target = data.draw(st.integers(0, size - 1), label="sentence")
    others = data.draw(st.lists(st.integers(0, size - 1), max_size=40), label="neighbours")
    position = data.draw(st.integers(0, len(others)), label="position")
    alone = generator.generate([model], _batch(task, [target]))[0][0]["tokens"]
    batch = others[:position] + [target] + others[position:]
    sample = _batch(task, batch)  # the collater sorts by length: find the row by id
    row = sample["id"].tolist().index(target)
    in_batch = generator.generate([model], sample)[row][0]["tokens"]
    assert torch.equal(alone, in_batch)


def test_deterministic_rejects_relaxed_acceptance(toy):
    data_bin, ckpt, _ = toy
    proc = run_cli("generate", [data_bin, "--path", ckpt, "--gen-subset", "test", *DECODE,
                                "--spec-decoding", "--spec-beta", "3"], check=False)
    assert proc.returncode == 2
    assert "--deterministic needs --spec-beta 1" in proc.stderr
    assert "Traceback" not in proc.stderr
