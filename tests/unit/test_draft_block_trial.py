"""``benchmarks/draft_block_trial.py``: drafting over a wider block keeps the
block's first K slots, which differ from a K-slot draft (the first pass is
bidirectional), and the patch leaves decoding as it was once undone."""

import torch

from benchmarks.draft_block_trial import draft_over_block
from nmt_specdec.decoding.passes.draft_pass import LeanDraftHead
from tests.helpers.specdec_toy import random_specdec_model, source_batch


def test_the_first_k_slots_of_the_wider_block_are_kept(tmp_path, monkeypatch):
    task, model = random_specdec_model(tmp_path)
    dictionary = task.target_dictionary
    sample = source_batch(dictionary, (6, 3), seed=4)
    encoder_out = model.encoder.forward_torchscript(sample["net_input"])
    lean = LeanDraftHead(model.draft_head, dictionary.pad())
    lean.start_batch(encoder_out)
    g = torch.Generator().manual_seed(3)
    inputs = (torch.randn(2, lean.head.mask_embedding.numel(), generator=g),
              torch.tensor([5, 7]), torch.tensor([2, 0]))
    own_two, own_four = lean.slot_logits(*inputs, 2), lean.slot_logits(*inputs, 4)

    monkeypatch.setattr(LeanDraftHead, "slot_logits", LeanDraftHead.slot_logits)  # undone after
    draft_over_block(4)
    two = lean.slot_logits(*inputs, 2)
    assert two.shape == own_two.shape
    assert torch.equal(two, own_four[:, :2])
    assert not torch.allclose(two, own_two)
    assert torch.equal(lean.slot_logits(*inputs, 4), own_four)
