"""The tree replay agrees with the engine it stands in for.

On the shipped model, replaying the linear ``chainK`` tree on the teacher-forced
ranks must give, sentence by sentence, exactly the iterations the engine's
beta=1 SpecDec takes at batch 1: that is what makes the replay's figures for
wider trees (which the engine does not decode) trustworthy.
"""


import pytest
from fairseq.dataclass.configs import GenerationConfig
import torch

from tests.helpers.shipped_model import SETTINGS, hand_written_sources, load_model


@pytest.mark.parametrize("k", [2, 4])
def test_chain_replay_equals_engine_iterations(k):
    from nmt_specdec.decoding.generator import SpecDecGenerator
    from nmt_specdec.decoding.options import DecodingOptions, LengthRules
    from benchmarks.draft_trees import greedy_token_ranks, parse_tree, replay

    torch.set_num_threads(1)
    model, task = load_model()
    sources = hand_written_sources(task, 16)
    rules = LengthRules.from_generation_args(GenerationConfig(
        min_len=1, unkpen=0.0, lenpen=1.0, max_len_a=SETTINGS["max_len_a"],
        max_len_b=SETTINGS["max_len_b"]), model)
    greedy = SpecDecGenerator(model, task.target_dictionary, DecodingOptions(k=0), rules)
    spec = SpecDecGenerator(model, task.target_dictionary, DecodingOptions(k=k), rules)
    dataset = task.build_dataset_for_inference(sources, [len(s) for s in sources])
    replayed, decoded, committed = [], [], 0
    for index in range(len(sources)):
        sample = dataset.collater([dataset[index]])
        tokens = greedy.generate([model], sample)[0][0]["tokens"]
        hypothesis = spec.generate([model], sample)[0][0]
        assert torch.equal(hypothesis["tokens"], tokens)  # beta=1 is greedy
        ranks = greedy_token_ranks(model, sample, [tokens], k)[0]
        replayed.append(replay(ranks, parse_tree(f"chain{k}")))
        decoded.append(hypothesis["iterations"])
        committed += tokens.numel()
    assert replayed == decoded
    assert sum(decoded) < committed  # drafts were accepted at all: fewer passes than tokens
