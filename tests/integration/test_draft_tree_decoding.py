"""``--spec-candidates``: a chain with leaves verified in one pass (issue #21).

On the shipped model and 40 hand-written sentences:
- beta=1 output equals greedy at batch 1 and at batch 8 (non-uniform starts);
- at batch 1 every sentence takes exactly the iterations that the exact replay
  (``benchmarks/draft_trees.py``) predicts for the same tree, so the
  engine and the replay check each other;
- the tree commits more tokens per iteration than the chain of the same depth;
- the onnxruntime graphs (tree positions and mask as inputs) decode it as the
  torch passes do;
- options that cannot combine with it are one-line errors.
"""


import pytest
from fairseq.dataclass.configs import GenerationConfig
import torch

from nmt_specdec.errors import UserError
from tests.helpers.shipped_model import (
    SETTINGS,
    assert_same_decoding,
    decode_all,
    hand_written_sources,
    load_model,
    shipped_generator,
)


@pytest.fixture(scope="module")
def shipped():
    torch.set_num_threads(1)
    model, task = load_model()
    return model, task, hand_written_sources(task)


_generator = shipped_generator


@pytest.mark.parametrize("k, candidates", [(2, 2), (4, 3)])
def test_tree_is_greedy_and_takes_the_replayed_iterations(shipped, k, candidates):
    from benchmarks.draft_trees import greedy_token_ranks, parse_tree, replay

    model, task, sources = shipped
    greedy, tree = _generator(model, task, 0), _generator(model, task, k, candidates)
    dataset = task.build_dataset_for_inference(sources, [len(s) for s in sources])
    shape = parse_tree(f"leaves{candidates}x{k}")
    for index in range(len(sources)):
        sample = dataset.collater([dataset[index]])
        tokens = greedy.generate([model], sample)[0][0]["tokens"]
        hypothesis = tree.generate([model], sample)[0][0]
        assert torch.equal(hypothesis["tokens"], tokens), index
        ranks = greedy_token_ranks(model, sample, [tokens], k)[0]
        assert hypothesis["iterations"] == replay(ranks, shape), index


def test_tree_beats_the_chain_and_stays_greedy_in_batches(shipped):
    model, task, sources = shipped
    greedy = decode_all(_generator(model, task, 0), model, task, sources, 8)
    rates = []
    for candidates in (1, 2):
        generator = _generator(model, task, 2, candidates)
        assert decode_all(generator, model, task, sources, 8) == greedy
        rates.append(generator.stats.mean_accepted_tokens)
    assert rates[1] > rates[0] + 0.05, rates


def test_options_that_do_not_combine_are_one_line_errors():
    from nmt_specdec.decoding.options import DecodingOptions

    with pytest.raises(UserError, match="--spec-candidates"):
        DecodingOptions(k=2, candidates=0)
    with pytest.raises(UserError, match="--deterministic"):
        DecodingOptions(k=2, candidates=2, deterministic=True)


def test_onnxruntime_tree_equals_the_torch_tree(shipped, onnx_cache):
    # The graph takes the tree's positions and ancestor mask as inputs: with fp32
    # drafts it must take the torch tree's iterations, sentence by sentence; with
    # the default 8-bit drafts the output must still be greedy, in batches too.
    from nmt_specdec.decoding.backends import make_backend
    from nmt_specdec.decoding.backends.onnxruntime.session import OrtBackend

    model, task, sources = shipped
    dictionary = task.target_dictionary
    fp32 = OrtBackend(model, dictionary.pad(), dictionary.eos(), int8_draft=False)
    assert_same_decoding(_generator(model, task, 2, 2, fp32), _generator(model, task, 2, 2),
                         model, task, sources)
    greedy = decode_all(_generator(model, task, 0), model, task, sources, 8)
    default = _generator(model, task, 4, 2, make_backend("onnxruntime", model, dictionary))
    assert decode_all(default, model, task, sources, 8) == greedy
    # --fused-draft: the verify call walks the tree and drafts the next block itself.
    fused = OrtBackend(model, dictionary.pad(), dictionary.eos(), fused_draft=True,
                       int8_draft=False)
    assert_same_decoding(_generator(model, task, 2, 2, fused), _generator(model, task, 2, 2),
                         model, task, sources)
    # Draft calls only for each sentence's first block and where a length constraint
    # changed the decision: the next drafts came with the verify call.
    assert fused.calls["draft"] <= len(sources) + fused.calls["verify"] / 10, fused.calls
    fused = _generator(model, task, 2, 2, make_backend("onnxruntime", model, dictionary,
                                                       fused_draft=True))
    assert decode_all(fused, model, task, sources, 8) == greedy


def test_relaxed_tree_decodes_every_sentence(shipped):
    # beta > 1 takes the other branch of the criterion (top-beta and tau, -inf guard).
    model, task, sources = shipped
    from nmt_specdec.decoding.generator import SpecDecGenerator
    from nmt_specdec.decoding.options import DecodingOptions, LengthRules

    rules = LengthRules.from_generation_args(GenerationConfig(
        min_len=1, unkpen=0.0, lenpen=1.0, max_len_a=SETTINGS["max_len_a"],
        max_len_b=SETTINGS["max_len_b"]), model)
    relaxed = SpecDecGenerator(model, task.target_dictionary,
                               DecodingOptions(k=2, beta=3, tau=1.0, candidates=2), rules)
    outputs = decode_all(relaxed, model, task, sources, 8)
    eos = task.target_dictionary.eos()
    assert len(outputs) == len(sources) and all(out[-1] == eos for out in outputs)
    assert relaxed.stats.mean_accepted_tokens > 1.5


def test_hub_takes_spec_candidates(shipped):
    # Checkpoints saved before the option lack it: the hub must still apply it.
    import fairseq_plugins  # noqa: F401
    from fairseq_plugins.specdec_model import SpecDecTransformerModel
    from tests.helpers.shipped_model import MODEL_DIR

    options = dict(checkpoint_file="model.pt", data_name_or_path=str(MODEL_DIR),
                   bpe="sentencepiece", sentencepiece_model=str(MODEL_DIR / "spm.model"),
                   spec_decoding=True, spec_k="2", backend="torch")
    tree = SpecDecTransformerModel.from_pretrained(str(MODEL_DIR), spec_candidates=2, **options)
    chain = SpecDecTransformerModel.from_pretrained(str(MODEL_DIR), **options)
    assert tree.task.cfg.spec_candidates == 2
    sentences = ["Möchten Sie die Änderungen speichern?", "Die Datei wurde nicht gefunden."]
    assert tree.translate(sentences, beam=1) == chain.translate(sentences, beam=1)
