"""A draft head file (:mod:`nmt_specdec.model.head_file`) attached to a stock
transformer drafts as the joint model's head does, and only onto its own verifier;
every file that cannot be used is one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from nmt_specdec.errors import CheckpointError
from nmt_specdec.model.head_file import (
    attach_head_file,
    set_head_defaults,
    verifier_fingerprints,
    write_head_file,
)
from tests.helpers.specdec_toy import (
    random_fairseq_model,
    random_specdec_model,
    source_batch,
)

STOCK_ARGS = ("--task", "translation", "--arch", "transformer", "--encoder-embed-dim", "32",
              "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
              "--decoder-ffn-embed-dim", "64", "--encoder-layers", "2", "--decoder-layers", "2",
              "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
              "--dropout", "0", "--share-all-embeddings")


@pytest.fixture(scope="module")
def joint(tmp_path_factory):
    task, model = random_specdec_model(tmp_path_factory.mktemp("joint"),
                                       extra_args=("--share-all-embeddings",))
    return task, model


def _stock(tmp_path: Path, joint_model=None, seed: int = 5):
    """A stock transformer of the joint model's shape: its verifier when given."""
    _, model = random_fairseq_model(tmp_path, STOCK_ARGS, seed)
    if joint_model is not None:
        verifier = {name: value for name, value in joint_model.state_dict().items()
                    if not name.startswith("draft_head.")}
        model.load_state_dict(verifier)
    return model.eval()


def _drafts(model, task, sample) -> torch.Tensor:
    """The head's first-pass logits for a toy batch (what drafting reads)."""
    net_input = sample["net_input"]
    encoder_out = model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"])
    rows = net_input["src_tokens"].size(0)
    states = torch.randn(rows, model.decoder.embed_tokens.embedding_dim,
                         generator=torch.Generator().manual_seed(0))
    last = torch.full((rows,), task.target_dictionary.eos())
    positions = torch.ones(rows, dtype=torch.long)
    return model.draft_head(states, last, positions, encoder_out, model.draft_block_size)


def test_the_attached_head_drafts_as_the_joint_head(joint, tmp_path):
    task, model = joint
    path = write_head_file(model, tmp_path / "head.pt")
    stock = _stock(tmp_path, model)
    assert verifier_fingerprints(stock) == verifier_fingerprints(model)
    attach_head_file(stock, path)
    assert stock.draft_block_size == model.draft_block_size
    sample = source_batch(task.target_dictionary, (5, 3))
    with torch.no_grad():
        ours, theirs = _drafts(stock, task, sample), _drafts(model, task, sample)
    # The file keeps the head in half precision: the same drafts up to its rounding.
    torch.testing.assert_close(ours, theirs, atol=2e-2, rtol=1e-2)
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


def test_a_half_and_a_bfloat16_cast_of_the_verifier_still_match(joint, tmp_path):
    _, model = joint
    path = write_head_file(model, tmp_path / "head.pt")
    for dtype in (torch.float16, torch.bfloat16):
        stock = _stock(tmp_path, model).to(dtype)
        attach_head_file(stock, path)
        assert stock.draft_head.mask_embedding.dtype == dtype


def test_another_verifier_is_refused_in_one_line(joint, tmp_path):
    _, model = joint
    path = write_head_file(model, tmp_path / "head.pt")
    with pytest.raises(CheckpointError, match="trained on another verifier") as error:
        attach_head_file(_stock(tmp_path), path)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("breakage", ["missing", "truncated", "pickled code", "other dict",
                                      "joint checkpoint", "already has a head"])
def test_every_unusable_file_is_one_line(joint, tmp_path, breakage):
    _, model = joint
    path = write_head_file(model, tmp_path / "head.pt")
    target = _stock(tmp_path, model)
    if breakage == "missing":
        path = tmp_path / "nothing.pt"
    elif breakage == "truncated":
        path.write_bytes(path.read_bytes()[: os.path.getsize(path) // 2])
    elif breakage == "pickled code":
        torch.save({"nmt_specdec_draft_head": 1, "shape": Path("x")}, path)  # not weights-only
    elif breakage == "other dict":
        torch.save({"model": {}}, path)
    elif breakage == "joint checkpoint":
        torch.save({"model": model.state_dict()}, path)
    else:
        target = model
    with pytest.raises(CheckpointError) as error:
        attach_head_file(target, path)
    assert "\n" not in str(error.value) and "--draft-head" in str(error.value)
    assert breakage == "already has a head" or not hasattr(target, "draft_head")


def test_a_head_files_default_refinement_count_is_rewritten_alone(joint, tmp_path):
    """scripts/set_head_defaults.py --refine-steps: the same weights and verifier,
    another default number of refinement runs; a head without refinement layers,
    or fewer than one run, is refused in one line."""
    import scripts.set_head_defaults as script

    _, model = random_specdec_model(tmp_path, extra_args=(
        "--share-all-embeddings", "--draft-refine-layers", "1", "--draft-refine-steps", "2"))
    path = write_head_file(model, tmp_path / "head.pt")
    assert script.main([str(path), "--refine-steps", "1", "--out", str(tmp_path / "once.pt")]) == 0
    before = torch.load(path, weights_only=True)
    after = torch.load(tmp_path / "once.pt", weights_only=True)
    assert (before["shape"]["refine_steps"], after["shape"]["refine_steps"]) == (2, 1)
    assert after["verifier"] == before["verifier"]
    assert all(torch.equal(after["weights"][name], weight)
               for name, weight in before["weights"].items())
    stock = _stock(tmp_path, model)
    attach_head_file(stock, tmp_path / "once.pt")
    assert stock.draft_head.refine_steps == 1
    plain = write_head_file(joint[1], tmp_path / "plain.pt")
    for head, steps in ((plain, "1"), (path, "0")):
        with pytest.raises(CheckpointError) as error:
            set_head_defaults(head, tmp_path / "x.pt", refine_steps=int(steps))
        assert "\n" not in str(error.value)
        assert script.main([str(head), "--refine-steps", steps]) == 1
    assert script.main([str(path)]) == 1  # nothing to set


def test_a_tied_heads_draft_vocabulary_is_rewritten_alone(tmp_path):
    """scripts/set_head_defaults.py --draft-vocab-size: a tied head drafts from as
    many of the verifier's output rows as its file says (0: every id), with the
    same weights; an untied head, whose projection is its own, is refused."""
    import scripts.set_head_defaults as script

    _, model = random_specdec_model(tmp_path, extra_args=(
        "--share-all-embeddings", "--draft-vocab-size", "12"))
    full = model.decoder.output_projection.out_features
    path = write_head_file(model, tmp_path / "head.pt")
    assert script.main([str(path), "--draft-vocab-size", "0", "--out",
                        str(tmp_path / "all.pt")]) == 0
    before = torch.load(path, weights_only=True)
    after = torch.load(tmp_path / "all.pt", weights_only=True)
    assert (before["shape"]["vocab_size"], after["shape"]["vocab_size"]) == (12, 0)
    assert all(torch.equal(after["weights"][name], weight)
               for name, weight in before["weights"].items())
    stock = _stock(tmp_path, model)
    attach_head_file(stock, tmp_path / "all.pt")
    assert stock.draft_head.vocab_size == full
    assert stock.draft_head.output_weight().shape[0] == full
    _, untied = random_specdec_model(tmp_path / "untied", extra_args=(
        "--share-all-embeddings", "--untie-draft-output", "--draft-vocab-size", "12"))
    own = write_head_file(untied, tmp_path / "own.pt")
    with pytest.raises(CheckpointError) as error:
        set_head_defaults(own, tmp_path / "x.pt", draft_vocab_size=0)
    assert "\n" not in str(error.value)
    assert script.main([str(path), "--draft-vocab-size", "-1"]) == 1
