"""``benchmarks/draft_vocab.py`` decodes the same tied head with other draft
vocabularies: a copy drafts from as many of the verifier's output rows as asked
(0: every one) with the very same weights, the model it copies is left as it
was, and a head with a projection of its own is refused in one line."""

import pytest
import torch

from benchmarks.draft_vocab import with_draft_vocab
from nmt_specdec.errors import UserError
from tests.helpers.specdec_toy import random_specdec_model


def test_a_copy_drafts_from_more_rows_with_the_same_weights(tmp_path):
    _, model = random_specdec_model(tmp_path, extra_args=(
        "--share-all-embeddings", "--draft-vocab-size", "12"))
    full = model.decoder.output_projection.out_features
    every, some = with_draft_vocab(model, 0), with_draft_vocab(model, 20)
    assert (model.draft_head.vocab_size, every.draft_head.vocab_size,
            some.draft_head.vocab_size) == (12, full, 20)
    assert every.draft_head.output_weight().shape[0] == full
    assert torch.equal(every.draft_head.output_weight()[:12], model.draft_head.output_weight())
    for name, weight in model.state_dict().items():
        assert torch.equal(every.state_dict()[name], weight)
    with pytest.raises(UserError):
        with_draft_vocab(model, full + 1)


def test_an_untied_head_is_refused(tmp_path):
    _, model = random_specdec_model(tmp_path, extra_args=(
        "--share-all-embeddings", "--untie-draft-output", "--draft-vocab-size", "12"))
    with pytest.raises(UserError) as error:
        with_draft_vocab(model, 0)
    assert "\n" not in str(error.value)
