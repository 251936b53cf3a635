"""What only some drafters can do is refused in one line when the generator is built.

Every drafter proposes K tokens (:class:`~nmt_specdec.decoding.drafters.Drafter`);
draft trees need :class:`~nmt_specdec.decoding.drafters.ProposesCandidates` and
speculative sampling :class:`~nmt_specdec.decoding.drafters.GivesDistribution` (the
slots' logits at once) or :class:`~nmt_specdec.decoding.drafters.DraftsByChoice` (a
chain drafter, slot after slot).
"""

from __future__ import annotations

import pytest

from nmt_specdec.decoding.drafters import (
    Drafter,
    DraftsByChoice,
    GivesDistribution,
    ProposesCandidates,
    check_abilities,
)
from nmt_specdec.errors import UserError


class _Both(ProposesCandidates, GivesDistribution):
    pass


def test_a_plain_drafter_drafts_chains_greedily():
    check_abilities(Drafter(), candidates=1, sampling=False)


def test_trees_need_candidates():
    with pytest.raises(UserError, match="--spec-candidates 3: this drafter .Drafter. proposes"):
        check_abilities(Drafter(), candidates=3, sampling=False)
    check_abilities(ProposesCandidates(), candidates=3, sampling=False)


def test_sampling_needs_the_drafts_distribution():
    with pytest.raises(UserError, match="--sampling with --spec-decoding needs"):
        check_abilities(ProposesCandidates(), candidates=1, sampling=True)
    check_abilities(_Both(), candidates=3, sampling=True)
    check_abilities(DraftsByChoice(), candidates=1, sampling=True)
    with pytest.raises(UserError, match="--spec-candidates 2: this drafter .DraftsByChoice."):
        check_abilities(DraftsByChoice(), candidates=2, sampling=True)


def test_the_generator_refuses_at_build_time(tmp_path):
    from fairseq.dataclass.configs import GenerationConfig

    from nmt_specdec.decoding.generator import SpecDecGenerator
    from nmt_specdec.decoding.options import DecodingOptions
    from tests.helpers.specdec_toy import PadDrafter, random_specdec_model

    task, model = random_specdec_model(tmp_path)
    args = GenerationConfig(beam=1, max_len_a=0.0, max_len_b=5)
    with pytest.raises(UserError, match="proposes one token per slot"):
        SpecDecGenerator.from_generation_args(model, task.target_dictionary,
                                              DecodingOptions(k=2, candidates=2), args,
                                              PadDrafter(task.target_dictionary.pad()))
