"""Slots that see each other: the draft head's causal refinement pass (issue #21).

On the shipped model (its verifier and first pass; a refinement layer added
fresh when the shipped head has none), 40 hand-written sentences:
- the refinement is causal: slot j's logits never read the tokens of slot j
  and later, so teacher forcing in training cannot leak the answer;
- the lean torch pass equals the reference module run step by step, and K runs
  of the refinement reach a fixed point (the drafts of an autoregressive
  drafter);
- beta=1 output equals greedy with a refined head, on torch and on
  onnxruntime, and the onnxruntime draft graph (refinement unrolled) drafts
  as the torch pass does: same iterations, sentence by sentence;
- ``--spec-refine-steps`` changes one decoder's refinement runs, not the head's;
- ``--init-draft-head-from`` copies a trained head and refuses one that does
  not fit, in one line; a deeper first pass starts as the head it grows from.
"""

import pytest
import torch

from nmt_specdec.model.draft_head import DraftHead, project_slots
from nmt_specdec.errors import UserError
from tests.helpers.shipped_model import (
    MODEL_DIR,
    assert_same_decoding,
    decode_all,
    hand_written_sources,
    load_model,
    shipped_generator as _generator,
)

K = 3


def with_refinement(model, steps: int = 1):
    """The model with a refining head (the shipped head's first pass, kept)."""
    head = model.draft_head
    if len(head.refine_layers):
        head.refine_steps = steps
        return model
    torch.manual_seed(0)
    refined = DraftHead(model.decoder, len(head.layers), head.output_projection is not None,
                        head.vocab_size, refine_layers=1, refine_steps=steps)
    missing, unexpected = refined.load_state_dict(head.state_dict(), strict=False)
    assert not unexpected and all(key.startswith("refine_") for key in missing)
    model.draft_head = refined.eval()
    return model


@pytest.fixture(scope="module")
def shipped():
    torch.set_num_threads(1)
    model, task = load_model()
    return with_refinement(model), task, hand_written_sources(task)


def _block(model, task, sources):
    """Head inputs for the first two sentences: states, last tokens, positions, encoder out."""
    dataset = task.build_dataset_for_inference(sources[:2], [len(s) for s in sources[:2]])
    sample = dataset.collater([dataset[0], dataset[1]])["net_input"]
    with torch.no_grad():
        encoder_out = model.encoder(sample["src_tokens"], src_lengths=sample["src_lengths"])
    torch.manual_seed(1)
    return (torch.randn(2, model.decoder.embed_dim), torch.tensor([20, 30]),
            torch.tensor([3, 5]), encoder_out)


def test_refinement_never_reads_the_slot_it_predicts(shipped):
    model, task, sources = shipped
    states, last, positions, encoder_out = _block(model, task, sources)
    head = model.draft_head
    tokens = torch.randint(4, 4000, (2, K))
    with torch.no_grad():
        _, before = head.forward_refined(states, last, positions, encoder_out, K,
                                         slot_tokens=tokens)
        for slot in range(K):  # slot index i reads last and tokens[:, :i] only
            changed = tokens.clone()
            changed[:, slot:] = torch.randint(4, 4000, (2, K - slot))
            _, after = head.forward_refined(states, last, positions, encoder_out, K,
                                            slot_tokens=changed)
            assert torch.allclose(after[:, : slot + 1], before[:, : slot + 1], atol=1e-5), slot
            if slot + 1 < K:
                assert not torch.allclose(after[:, slot + 1:], before[:, slot + 1:])


def test_lean_pass_runs_the_refinement_as_the_module_does(shipped):
    from nmt_specdec.decoding.passes.draft_pass import LeanDraftHead

    model, task, sources = shipped
    states, last, positions, encoder_out = _block(model, task, sources)
    head, pad = model.draft_head, task.target_dictionary.pad()
    with torch.no_grad():
        first, _ = head.forward_refined(states, last, positions, encoder_out, K)
        logits = first = first.index_fill(2, torch.tensor([pad]), float("-inf"))
        # A refinement run scores only each slot's best first-pass candidates.
        outside = torch.ones_like(first, dtype=torch.bool).scatter(
            2, first.topk(head.refine_shortlist, dim=-1).indices, False)
        for steps in range(K + 3):
            lean = LeanDraftHead(head, pad, refine_steps=steps)
            lean.start_batch(encoder_out)
            got = lean.slot_logits(states, last, positions, K)
            finite = logits.isfinite()
            assert torch.allclose(got[finite], logits[finite], atol=1e-4), steps
            assert torch.equal(got.argmax(-1), logits.argmax(-1)), steps
            drafts = logits.argmax(-1)
            if steps == K:
                fixed = drafts
            _, logits = head.forward_refined(states, last, positions, encoder_out, K,
                                             slot_tokens=drafts)
            logits = logits.masked_fill(outside, float("-inf"))
    # After K runs every slot reads drafts that no longer change.
    assert torch.equal(drafts, fixed)


@pytest.mark.parametrize("steps", [1, K - 1])
def test_beta1_with_a_refined_head_is_greedy(shipped, steps):
    model, task, sources = shipped
    with_refinement(model, steps)
    greedy = decode_all(_generator(model, task, 0), model, task, sources, 8)
    assert decode_all(_generator(model, task, K), model, task, sources, 1) == greedy
    assert decode_all(_generator(model, task, K, 2), model, task, sources, 8) == greedy
    with_refinement(model, 1)


def test_onnxruntime_draft_graph_refines_as_the_torch_pass(shipped, onnx_cache):
    from nmt_specdec.decoding.backends import make_backend
    from nmt_specdec.decoding.backends.onnxruntime.session import OrtBackend

    model, task, sources = shipped
    with_refinement(model, K - 1)
    dictionary = task.target_dictionary
    fp32 = OrtBackend(model, dictionary.pad(), dictionary.eos(), int8_draft=False)
    assert_same_decoding(_generator(model, task, K, backend=fp32), _generator(model, task, K),
                         model, task, sources)
    greedy = decode_all(_generator(model, task, 0), model, task, sources, 8)
    default = _generator(model, task, K, 1, make_backend("onnxruntime", model, dictionary))
    assert decode_all(default, model, task, sources, 8) == greedy
    with_refinement(model, 1)


def _decoded(generator, model, task, sources) -> list:
    """(tokens, iterations) of each sentence at batch 1."""
    dataset = task.build_dataset_for_inference(sources, [len(s) for s in sources])
    hyps = [generator.generate([model], dataset.collater([dataset[i]]))[0][0]
            for i in range(len(sources))]
    return [(hyp["tokens"].tolist(), hyp["iterations"]) for hyp in hyps]


def test_spec_refine_steps_drafts_as_a_head_set_to_run_that_often(shipped, onnx_cache):
    """--spec-refine-steps N on one decoder: its drafts are those of the head set
    to N runs, on torch and in onnxruntime's draft graph; the head's own setting
    and the other decoders on the same model stay as they were."""
    from nmt_specdec.decoding.backends.onnxruntime.session import OrtBackend
    from nmt_specdec.decoding.options import DecodingOptions

    model, task, sources = shipped
    with_refinement(model, 2)
    twice = _decoded(_generator(model, task, K), model, task, sources)
    with_refinement(model, 1)
    asked = DecodingOptions(k=K, refine_steps=2)
    dictionary = task.target_dictionary
    ort = OrtBackend(model, dictionary.pad(), dictionary.eos(), int8_draft=False,
                     refine_steps=2)
    own = _generator(model, task, K)
    assert _decoded(_generator(model, task, options=asked), model, task, sources) == twice
    assert _decoded(_generator(model, task, options=asked, backend=ort),
                    model, task, sources) == twice
    once = _decoded(own, model, task, sources)
    assert model.draft_head.refine_steps == 1
    assert [tokens for tokens, _ in once] == [tokens for tokens, _ in twice]  # beta=1
    assert sum(it for _, it in once) != sum(it for _, it in twice)


def test_init_draft_head_from_copies_a_head_or_refuses_in_one_line(shipped, tmp_path):
    from fairseq_plugins.specdec_task import _load_head_weights

    model, _, _ = shipped
    shipped_head = {k: v.clone() for k, v in model.draft_head.state_dict().items()}
    with torch.no_grad():
        for param in model.draft_head.layers.parameters():
            param.zero_()
    _load_head_weights(model, str(MODEL_DIR / "model.pt"))
    for key, value in model.draft_head.state_dict().items():
        if not key.startswith("refine_"):
            assert torch.equal(value, shipped_head[key]), key
    head = model.draft_head
    deeper = DraftHead(model.decoder, len(head.layers) + 1, head.output_projection is not None,
                       head.vocab_size, refine_layers=len(head.refine_layers))
    other = type("Model", (), {"draft_head": deeper})()
    with pytest.raises(UserError, match="must be pre-norm") as err:  # the tiny model is post-norm
        _load_head_weights(other, str(MODEL_DIR / "model.pt"))
    assert "\n" not in str(err.value)
    shallower = DraftHead(model.decoder, 1, head.output_projection is not None,
                          head.vocab_size, refine_layers=len(head.refine_layers))
    shallower.layers = torch.nn.ModuleList()
    with pytest.raises(UserError, match="does not fit") as err:
        _load_head_weights(type("Model", (), {"draft_head": shallower})(),
                           str(MODEL_DIR / "model.pt"))
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="no such file"):
        _load_head_weights(model, str(tmp_path / "missing.pt"))


def test_a_deeper_first_pass_starts_as_the_head_it_grows_from(shipped, tmp_path):
    """``--init-draft-head-from`` a head with fewer first-pass layers: the layers
    past the file's start as the identity (pre-norm layers), so the deeper head
    scores every slot as the file's head does, and training grows it from there."""
    from fairseq_plugins.specdec_task import _load_head_weights
    from nmt_specdec.model.head_file import write_head_file

    model, task, sources = shipped
    kept, normalize_before = model.draft_head, model.decoder.cfg.decoder.normalize_before
    model.decoder.cfg.decoder.normalize_before = True  # the head's layers are built from it
    try:
        torch.manual_seed(0)
        model.draft_head = DraftHead(model.decoder, 1).eval()
        path = write_head_file(model, tmp_path / "one.pt")
        _load_head_weights(model, str(path))  # its weights as the file holds them
        one = model.draft_head
        model.draft_head = deeper = DraftHead(model.decoder, 2).eval()
        _load_head_weights(model, str(path))
        block = _block(model, task, sources)
        with torch.no_grad():
            torch.testing.assert_close(deeper(*block, K), one(*block, K))
        assert deeper.layers[1].fc1.weight.abs().sum() > 0  # only its outputs start at zero
    finally:
        model.draft_head = kept
        model.decoder.cfg.decoder.normalize_before = normalize_before


def test_init_draft_head_from_takes_a_head_file_of_the_same_verifier(shipped, tmp_path):
    """A shipped head (HEAD.pt, half precision) trains on from where it stopped; a
    head file of another verifier is refused in one line."""
    from fairseq_plugins.specdec_task import _load_head_weights
    from nmt_specdec.model.head_file import write_head_file

    model, _, _ = shipped
    head_path = write_head_file(model, tmp_path / "head.pt")
    stored = {k: v.clone() for k, v in model.draft_head.state_dict().items()}
    with torch.no_grad():
        for param in model.draft_head.parameters():
            param.zero_()
    _load_head_weights(model, str(head_path))
    for key, value in model.draft_head.state_dict().items():
        expected = stored[key].half().to(value.dtype) if value.is_floating_point() else stored[key]
        assert torch.equal(value, expected), key
    content = torch.load(head_path, weights_only=True)
    content["verifier"] = {kind: "0" * 64 for kind in content["verifier"]}
    torch.save(content, tmp_path / "other.pt")
    with pytest.raises(UserError, match="--init-draft-head-from .*another verifier") as err:
        _load_head_weights(model, str(tmp_path / "other.pt"))
    assert "\n" not in str(err.value)


def test_bad_refinement_options_are_one_line_errors(shipped):
    model, _, _ = shipped
    for layers, steps in ((-1, 1), (1, 0)):
        with pytest.raises(UserError, match="--draft-refine-steps >= 1") as err:
            DraftHead(model.decoder, 1, refine_layers=layers, refine_steps=steps)
        assert "\n" not in str(err.value)


def test_fairseq_takes_the_decoding_and_the_training_flag_side_by_side():
    """fairseq-train's parser holds the task's decoding flags and the model's:
    --spec-refine-steps (decoding) beside --draft-refine-steps (the head's own)."""
    from fairseq import options

    from nmt_specdec.decoding.options import DecodingOptions
    from tests.helpers.shipped_model import REPO_ROOT

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(MODEL_DIR), "--user-dir", str(REPO_ROOT / "fairseq_plugins"), "--task", "translation_specdec",
        "--arch", "specdec_transformer", "--draft-refine-layers", "1",
        "--draft-refine-steps", "1", "--spec-refine-steps", "3"])
    assert (args.draft_refine_steps, args.spec_refine_steps) == (1, 3)
    assert DecodingOptions.from_flags(args).refine_steps == 3


@pytest.mark.parametrize("slots", [1, 4])
def test_slot_logits_are_each_rows_product_with_the_projection(slots):
    states = torch.randn(slots, 5, 8)  # (K, B', C), time-major as the head's layers give them
    weight = torch.randn(11, 8)
    logits = project_slots(states, weight)
    assert logits.shape == (5, slots, 11)
    for row in range(5):
        for slot in range(slots):
            assert torch.allclose(logits[row, slot], weight @ states[slot, row], atol=1e-5)
