"""Evaluation on CUDA end to end (issue 20, item 6); skipped without a GPU.

The toy checkpoint and test set are those of ``test_evaluate_speed.py``. The
model lives on the GPU; test-set sources stay CPU tensors, and every step
(batches, the SpecDec loop, profiling, the logit gaps of beta=1 differences)
must move them to the model's device.
"""

from __future__ import annotations

import pytest
import torch

from tests.integration.test_evaluate_speed import _config, toy  # noqa: F401  (fixture)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_evaluation_runs_on_cuda_end_to_end(toy: dict, monkeypatch) -> None:
    from nmt_specdec.evaluation import mismatch
    from nmt_specdec.evaluation.mismatch import NEAR_TIE_LOGIT_GAP

    original = mismatch.logit_gaps

    def spy(model, sources, *args, **kwargs):  # the gaps are computed on the GPU
        assert next(model.parameters()).is_cuda
        return original(model, sources, *args, **kwargs)

    monkeypatch.setattr(mismatch, "logit_gaps", spy)
    results = toy["script"].run(_config(toy, "cuda", cpu=False, grid_auto=True,
                                        profile=True))
    assert results["machine"]["device"].startswith("cuda") and results["machine"]["gpu"]
    assert results["memory"]["cuda_peak_mib"] > 0
    for row in results["rows"]:
        assert row["cuda_peak_mib"] > 0 and row["speedup"] > 0
        if row["role"] != "stock" and row["beta"] == 1:
            assert row["differs_from_greedy"] == len(
                [g for g in results["greedy_mismatches"] if g["decoder"] == row["name"]
                 and g["batch_size"] == row["batch_size"]])
    assert all(g["logit_gap"] < NEAR_TIE_LOGIT_GAP for g in results["greedy_mismatches"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_logit_gaps_take_cpu_sources_for_a_cuda_model(tmp_path) -> None:
    from nmt_specdec.evaluation.mismatch import logit_gaps
    from tests.helpers.specdec_toy import random_specdec_model, source_batch

    task, model = random_specdec_model(tmp_path)
    dictionary = task.target_dictionary
    sample = source_batch(dictionary, (6, 4), seed=2)
    sources = [s[s.ne(dictionary.pad())] for s in sample["net_input"]["src_tokens"]]
    reference = {0: [5, 6, 7, dictionary.eos()], 1: [8, dictionary.eos()]}
    other = {0: [5, 6, 9, dictionary.eos()], 1: [8, dictionary.eos()]}
    on_cpu = logit_gaps(model, sources, reference, other, dictionary.eos())
    on_cuda = logit_gaps(model.cuda(), sources, reference, other, dictionary.eos())
    assert [g["step"] for g in on_cuda] == [2]
    assert on_cuda[0]["logit_gap"] == pytest.approx(on_cpu[0]["logit_gap"], abs=1e-3)
