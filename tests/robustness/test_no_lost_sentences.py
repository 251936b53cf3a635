"""fairseq's batch_by_size drops the sentences left over after rounding batches
to --required-batch-size-multiple; with the plugin loaded none are lost."""

from pathlib import Path

import numpy as np
import pytest
from fairseq.data import data_utils

import fairseq_plugins  # noqa: F401  (installs the wrapper)
from tests.helpers.fairseq_toy import PLUGINS_DIR, hypotheses, run_cli


@pytest.mark.parametrize("n, max_sentences, max_tokens", [
    (50, 64, None), (50, 16, None), (100, 64, None), (7, 64, None), (50, None, 64)])
def test_every_index_is_batched_once(n, max_sentences, max_tokens):
    batches = data_utils.batch_by_size(
        np.arange(n), lambda i: 5, num_tokens_vec=np.full(n, 5), max_tokens=max_tokens,
        max_sentences=max_sentences, required_batch_size_multiple=8)
    flat = np.concatenate(batches).tolist()
    assert sorted(flat) == list(range(n))
    if max_sentences:
        assert max(len(b) for b in batches) <= max_sentences


def test_generate_prints_every_sentence(toy_data_bin: Path, tiny_transformer_ckpt: Path):
    proc = run_cli("generate", [toy_data_bin, "--path", tiny_transformer_ckpt, "--cpu",
                                "--user-dir", PLUGINS_DIR, "--gen-subset", "test",
                                "--batch-size", "64", "--beam", "1", "--max-len-b", "12"])
    hyps = hypotheses(proc.stdout)
    expected = sum(1 for _ in open(toy_data_bin.parent / "raw" / "test.src"))
    assert sorted(hyps) == list(range(expected))
