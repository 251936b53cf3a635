"""``nmt-specdec-add-draft-head`` on a stock toy Transformer (issue #13).

One short run of the whole command: the distilled targets are the verifier's
own greedy translations, one per source line and in order; the written
checkpoint keeps every verifier weight bit for bit; beta=1 decoding with the
new head equals greedy; the checkpoint decodes with stock ``fairseq-generate
--beam 5`` and with ``--spec-decoding``; the head trained from the verifier's
cached states, whose draft loss equals the live verifier's (and, under bfloat16
autocast, nearly equals it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt_specdec.checkpoint_safety import load_checkpoint
from nmt_specdec.workflows import add_draft_head, cache_states
from tests.helpers.fairseq_toy import PLUGINS_DIR, hypotheses, run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def added(tmp_path_factory, toy_data_bin: Path, tiny_transformer_ckpt: Path):
    out = tmp_path_factory.mktemp("add_head")
    cfg = add_draft_head.AddHeadConfig(
        checkpoint=tiny_transformer_ckpt, data=toy_data_bin, out=out, k=3, layers=1,
        vocab_size=0, budget_minutes=0.15, max_tokens=1024, threads=1, valid_sentences=20)
    return cfg, add_draft_head.run(cfg)


def test_verifier_is_bit_identical(added) -> None:
    cfg, _ = added
    stock = load_checkpoint(str(cfg.checkpoint))["model"]
    joint = load_checkpoint(str(cfg.out / "model.pt"))
    assert "last_optimizer_state" not in joint
    for name, value in stock.items():
        assert torch.equal(joint["model"][name], value), name
    assert any(name.startswith("draft_head.") for name in joint["model"])
    # The default head refines its drafts (slots read the draft before them).
    assert any(name.startswith("draft_head.refine_layers.0.") for name in joint["model"])


def test_distilled_targets_are_the_verifiers_greedy_output_in_order(added) -> None:
    cfg, _ = added
    sources = (cfg.data / "valid.src-tgt.src.bin").stat().st_size
    assert sources > 0
    result = run_cli("generate", [
        cfg.data, "--path", cfg.checkpoint, "--gen-subset", "valid", "--beam", "1",
        "--max-len-a", "1.2", "--max-len-b", "10", "--batch-size", "7", "--cpu",
        "--user-dir", PLUGINS_DIR])
    greedy = hypotheses(result.stdout)
    lines = (cfg.out / "distill-valid" / "chunks").glob("*.txt")
    distilled = [line.rstrip("\n") for path in sorted(lines)
                 for line in path.read_text().splitlines()]
    assert len(distilled) == len(greedy)
    assert [distilled[i] for i in sorted(greedy)] == [greedy[i] for i in sorted(greedy)]


def test_report_beta1_equals_greedy(added) -> None:
    _, report = added
    assert [row["k"] for row in report["rows"]] == [0, 1, 2, 3]
    assert report["reference"] == "fairseq SequenceGenerator, beam 1"
    assert all(row["same_as_greedy"] == report["sentences"] for row in report["rows"])
    assert report["rows"][0]["tokens_per_iteration"] == 1.0
    assert all(len(row["slot_acceptance"]) == row["k"] for row in report["rows"])
    assert (added[0].out / add_draft_head.REPORT).is_file()


@pytest.mark.parametrize("flags", [["--beam", "5"], ["--spec-decoding", "--spec-k", "3"]])
def test_checkpoint_decodes_with_fairseq_generate(added, flags) -> None:
    cfg, _ = added
    result = run_cli("generate", [
        cfg.data, "--path", cfg.out / "model.pt", "--gen-subset", "valid",
        "--task", "translation_specdec", "--batch-size", "8", "--cpu",
        "--user-dir", PLUGINS_DIR, *flags])
    assert len(hypotheses(result.stdout)) > 0


def test_the_head_file_drafts_for_the_stock_checkpoint(added) -> None:
    """``head.pt`` beside ``model.pt``, attached by ``--draft-head`` to the input
    checkpoint: the same output as the joint checkpoint, in a file a fraction of its size."""
    cfg, report = added
    head = cfg.out / "head.pt"
    assert report["head_file"] == str(head)
    assert head.stat().st_size < (cfg.out / "model.pt").stat().st_size / 2
    common = [cfg.data, "--gen-subset", "valid", "--task", "translation_specdec",
              "--batch-size", "8", "--cpu", "--user-dir", PLUGINS_DIR, "--beam", "1",
              "--spec-decoding", "--spec-k", "3"]
    joint = hypotheses(run_cli("generate", [*common, "--path", cfg.out / "model.pt"]).stdout)
    stock = hypotheses(run_cli("generate", [*common, "--path", cfg.checkpoint,
                                            "--draft-head", head]).stdout)
    assert stock == joint and len(stock) > 0


def test_the_hub_attaches_the_head_file(added) -> None:
    """``draft_head=`` on the hub: a stock checkpoint's ``translation`` task
    decodes through ``translation_specdec`` with the head, as greedy (beta=1)."""
    from fairseq_plugins.specdec_model import SpecDecTransformerModel
    from tests.helpers.fairseq_toy import TOY_ALPHABET

    cfg, _ = added
    sentences = [" ".join(TOY_ALPHABET[i: i + 6]) for i in range(0, 12, 3)]
    outputs = []
    for spec in ({}, {"spec_decoding": True, "spec_k": "3", "draft_head": str(cfg.out / "head.pt")}):
        hub = SpecDecTransformerModel.from_pretrained(
            str(cfg.checkpoint.parent), checkpoint_file=cfg.checkpoint.name,
            data_name_or_path=str(cfg.data), **spec)
        outputs.append(hub.translate(sentences, beam=1))
    assert hasattr(hub.models[0], "draft_head")
    assert outputs[1] == outputs[0] and all(outputs[0])


def test_training_read_the_verifiers_cached_states(added) -> None:
    # By default the head trains from one pass of the verifier, cached: the
    # report gives the cache's size and the updates per second.
    cfg, report = added
    assert cfg.state_cache and report["state_cache_bytes"] > 0
    for split in ("train", "valid"):
        assert (cfg.out / add_draft_head.STATES / split / "meta.json").is_file()
    assert report["updates_per_second"] > 0
    # --precision auto: bf16 autocast where this machine multiplies bf16 natively.
    assert report["precision"] == add_draft_head.training_precision("auto")
    # The shipped checkpoint keeps no path of the training machine.
    joint = load_checkpoint(str(cfg.out / "model.pt"))
    assert joint["cfg"]["task"]["cached_states"] is None


def test_the_cached_draft_loss_equals_the_live_one(added) -> None:
    """The criterion on a batch with cached states gives the draft loss of the
    same batch with the verifier run live (up to the cache's float16 rounding)."""
    from fairseq_plugins.specdec_criterion import SpecDecJointLoss
    from nmt_specdec import checkpoints

    cfg, _ = added
    checkpoints.register_plugin()
    model, task = checkpoints.load(str(cfg.out / "model.pt"), {"data": str(cfg.out / "data")})
    model.freeze_verifier()
    model.eval()  # no dropout; validation cuts come from a fixed seed
    task.cfg.cached_states = str(cfg.out / add_draft_head.STATES)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    sample = dataset.collater([dataset[i] for i in range(12)])
    criterion = SpecDecJointLoss(task, False, 0.1)
    with torch.no_grad():
        _, _, cached = criterion(model, sample)
        live_sample = {k: v for k, v in sample.items() if not k.startswith("cached_")}
        _, _, live = criterion(model, live_sample)
    assert cached["ar_loss"] == 0 and live["ar_loss"] > 0
    assert cached["draft_total"] == live["draft_total"] > 0
    assert float(cached["draft_loss"]) == pytest.approx(float(live["draft_loss"]), rel=2e-3)
    assert abs(cached["draft_correct"] - live["draft_correct"]) <= 1


def test_bf16_autocast_trains_the_head_alone_at_the_fp32_loss(added) -> None:
    """--draft-bf16 (``--precision bf16``): the losses run under bfloat16 autocast,
    near the float32 loss but not equal to it, and a training step still
    updates only the head."""
    from fairseq_plugins.specdec_criterion import SpecDecJointLoss
    from nmt_specdec import checkpoints

    cfg, _ = added
    checkpoints.register_plugin()
    model, task = checkpoints.load(str(cfg.out / "model.pt"), {"data": str(cfg.out / "data")})
    model.freeze_verifier()
    task.cfg.cached_states = str(cfg.out / add_draft_head.STATES)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    sample = dataset.collater([dataset[i] for i in range(12)])
    criterion = SpecDecJointLoss(task, False, 0.1)
    losses = {}
    for bf16 in (False, True):
        task.cfg.draft_bf16 = bf16
        losses[bf16] = float(task.valid_step(sample, model, criterion)[0])
    assert losses[True] != losses[False]
    assert losses[True] == pytest.approx(losses[False], rel=2e-2)

    class Backward:
        def backward(self, loss):
            loss.backward()

    loss, _, _ = task.train_step(sample, model, criterion, Backward(), update_num=1)
    assert torch.isfinite(loss)
    for name, param in model.named_parameters():
        trained = name.startswith("draft_head.")
        assert (param.grad is not None) == (trained and param.requires_grad), name


# cache_states on its own: what the verifier computes for each sentence alone
# (batched and padded there, float16 here), in dataset order; a rerun keeps
# finished shards and rebuilds a damaged one.

@pytest.fixture(scope="module")
def cached(tmp_path_factory, toy_data_bin: Path, tiny_transformer_ckpt: Path):
    out = tmp_path_factory.mktemp("states") / "valid"
    cache = cache_states.run(tiny_transformer_ckpt, toy_data_bin, "valid", out,
                             max_tokens=64, shard_sentences=16, progress=False)
    return out, cache


def test_states_are_the_verifiers_for_each_sentence_alone(cached, toy_data_bin,
                                                          tiny_transformer_ckpt) -> None:
    _, cache = cached
    model, task = cache_states.load_verifier(tiny_transformer_ckpt, toy_data_bin)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    assert len(cache) == len(dataset) > 16  # more than one shard
    eos = task.target_dictionary.eos()
    for index in (0, 7, 16, len(dataset) - 1):
        source, target = dataset.src[index], dataset.tgt[index]
        with torch.no_grad():
            out = model.encoder(source.unsqueeze(0), src_lengths=torch.tensor([len(source)]))
            prev = torch.cat([target.new_full((1,), eos), target[:-1]]).unsqueeze(0)
            states, _ = model.decoder(prev, encoder_out=out, features_only=True)
        encoder, cached_states = cache[index]
        np.testing.assert_allclose(encoder, out["encoder_out"][0][:, 0].numpy(),
                                   atol=5e-3, rtol=2e-3)
        np.testing.assert_allclose(cached_states, states[0].numpy(), atol=5e-3, rtol=2e-3)


def test_a_rerun_keeps_finished_shards_and_rebuilds_a_damaged_one(
        cached, toy_data_bin, tiny_transformer_ckpt) -> None:
    out, cache = cached
    kept = (out / "shard-00000" / "states.npy").stat().st_mtime_ns
    indices = (0, 17, len(cache) - 1)
    before = {i: [np.array(a) for a in cache[i]] for i in indices}
    damaged = out / "shard-00001" / "encoder.npy"
    damaged.write_bytes(b"not an array")
    again = cache_states.run(tiny_transformer_ckpt, toy_data_bin, "valid", out,
                             max_tokens=64, shard_sentences=16, progress=False)
    assert (out / "shard-00000" / "states.npy").stat().st_mtime_ns == kept
    for index in indices:
        for new, old in zip(again[index], before[index]):
            np.testing.assert_array_equal(new, old)


def test_a_rerun_with_other_refinement_runs_keeps_the_training(added) -> None:
    """--refine-steps is how often decoding runs the refinement, not a training
    setting: rerun with another value, the run keeps its checkpoints and writes
    its head and its report for the new count."""
    cfg, _ = added
    kept = cfg.out / "checkpoints" / "kept"
    kept.write_text("")
    report = add_draft_head.run(dataclasses.replace(cfg, refine_steps=2))
    assert kept.is_file()
    assert report["refine_steps"] == 2
    head = torch.load(cfg.out / "head.pt", map_location="cpu", weights_only=True)
    assert head["shape"]["refine_steps"] == 2


def test_the_acceptance_report_runs_the_refinement_as_often_as_asked(added) -> None:
    """``acceptance_report(..., refine_steps=R)`` decodes with ``--spec-refine-steps R``
    (the checkpoint's head untouched): every count reports itself and keeps beta=1
    equal to fairseq's greedy on every sentence."""
    from nmt_specdec.workflows.head_report import acceptance_report

    cfg, _ = added
    for steps in (1, 3):
        report = acceptance_report(cfg.out / "model.pt", cfg.out / "data", "valid", [3], 8,
                                   threads=1, refine_steps=steps)
        assert report["refine_steps"] == steps
        assert [row["same_as_greedy"] for row in report["rows"]] == [8, 8]


def test_the_acceptance_report_reads_a_head_file_on_its_stock_verifier(added) -> None:
    """``benchmarks/head_acceptance.py --checkpoint VERIFIER --draft-head HEAD``: the
    head file drafts on the stock checkpoint it was trained on, at its own
    refinement count, with beta=1 equal to fairseq's greedy."""
    from nmt_specdec.workflows.head_report import acceptance_report

    cfg, _ = added
    head = torch.load(cfg.out / "head.pt", map_location="cpu", weights_only=True)
    report = acceptance_report(cfg.checkpoint, cfg.out / "data", "valid", [3], 8, threads=1,
                               draft_head=cfg.out / "head.pt")
    assert report["refine_steps"] == head["shape"]["refine_steps"]
    assert [row["same_as_greedy"] for row in report["rows"]] == [8, 8]
    assert len(report["rows"][1]["slot_acceptance"]) == 3
