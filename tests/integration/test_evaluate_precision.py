"""``nmt-specdec-evaluate --fp16/--bf16``: half-precision rows beside the fp32 ones.

The toy checkpoint and test set are those of ``test_evaluate_speed.py``. A
half-precision row decodes with a cast copy of the model; its "vs engine greedy"
and its beta=1 agreement refer to the engine greedy of the same precision; a
CTranslate2 compute type the device lacks drops its row instead of failing.
"""

from __future__ import annotations

import ctranslate2
import pytest
import torch

from tests.integration.test_evaluate_speed import _config, toy  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def bf16_results(toy: dict) -> dict:
    return toy["script"].run(_config(toy, "bf16", precisions=("bfloat16",), ct2=True,
                                     beams=(1,), grid_beta=(1,), batch_sizes=(1, 4),
                                     repeats=1))


def test_half_rows_are_named_and_typed(bf16_results: dict) -> None:
    rows = {(row["name"], row["batch_size"]): row for row in bf16_results["rows"]}
    for batch in (1, 4):
        for name in ("stock greedy", "engine greedy", "SpecDec K=4 β=1"):
            assert rows[name, batch]["dtype"] == "float32"
            assert rows[f"{name} bf16", batch]["dtype"] == "bfloat16"
        # The half rows' own greedy is their "vs engine greedy" reference.
        assert rows["engine greedy bf16", batch]["speedup_vs_k0"] == pytest.approx(1.0)
    device = "cuda" if bf16_results["machine"]["device"].startswith("cuda") else "cpu"
    has_bf16 = "bfloat16" in ctranslate2.get_supported_compute_types(device)
    assert (("CTranslate2 greedy bf16", 1) in rows) == has_bf16
    assert ("CTranslate2 greedy fp32", 1) in rows


def test_half_rows_decode_with_a_half_model(bf16_results: dict, toy: dict) -> None:
    # Speedups against fp32 stock greedy stay defined, BLEU is computed, and the
    # stock fp32 row is still the baseline (1.00x), not its bf16 twin.
    rows = [row for row in bf16_results["rows"] if row["dtype"] == "bfloat16"]
    assert rows and all(row["speedup"] > 0 and row["bleu"] >= 0 for row in rows)
    baseline = [row for row in bf16_results["rows"] if row["name"] == "stock greedy"]
    assert all(row["speedup"] == pytest.approx(1.0) for row in baseline)


def test_half_beta1_differences_are_read_against_half_greedy(bf16_results: dict) -> None:
    for gap in bf16_results["greedy_mismatches"]:
        if "bf16" in gap["decoder"]:
            assert gap["reference"] == "engine greedy bf16"
            assert gap["near_tie"], gap
        else:
            assert gap["reference"] == "stock greedy"


def test_half_rows_run_on_torch_whatever_the_backend(toy: dict, onnx_cache) -> None:
    results = toy["script"].run(_config(toy, "ort", precisions=("float16",), beams=(1,),
                                        grid_beta=(1,), batch_sizes=(1,), repeats=1,
                                        backends=("onnxruntime",), cpu=True))
    half = [row for row in results["rows"] if row["dtype"] == "float16"]
    assert {row["name"] for row in half} >= {"engine greedy fp16", "SpecDec K=4 β=1 fp16"}
    assert all(row["backend"] in (None, "torch") for row in half)


def test_precision_copies_leave_the_fp32_model_alone(toy: dict) -> None:
    from nmt_specdec.evaluation.pipeline import precision_copies

    model = torch.nn.Linear(2, 2)
    copies = precision_copies(model, ("bfloat16", "float16"))
    assert copies["float32"] is model and model.weight.dtype == torch.float32
    assert copies["bfloat16"].weight.dtype == torch.bfloat16
    assert copies["float16"].weight.dtype == torch.float16


def test_graphs_off_rows_are_read_against_their_own_greedy(toy: dict) -> None:
    # --graphs-off adds every torch row again, eager: its "vs engine greedy" is the
    # eager greedy's, and the graphed rows keep theirs (on a CPU both run eagerly).
    results = toy["script"].run(_config(toy, "graphs", graphs_off=True, beams=(1,),
                                        grid_beta=(1,), batch_sizes=(1,), repeats=1))
    rows = {row["name"]: row for row in results["rows"]}
    for name in ("engine greedy", "engine greedy [graphs off]"):
        assert rows[name]["speedup_vs_k0"] == pytest.approx(1.0)
    for suffix in ("", " [graphs off]"):
        row, greedy = rows[f"SpecDec K=4 β=1{suffix}"], rows[f"engine greedy{suffix}"]
        assert row["speedup_vs_k0"] == pytest.approx(
            greedy["wall_s_median"] / row["wall_s_median"], rel=1e-6)
    assert rows["SpecDec K=4 β=1 [graphs off]"]["cuda_graphs"] == "off"
