"""``benchmarks/draft_call_cost.py``'s heads of other shapes: the shape asked for,
the verifier's own configuration left as it was."""

from benchmarks.draft_call_cost import random_head
from tests.helpers.specdec_toy import random_specdec_model


def test_a_random_head_has_the_shape_asked_and_leaves_the_verifier_alone(tmp_path):
    _, model = random_specdec_model(tmp_path)
    ffn = model.decoder.cfg.decoder.ffn_embed_dim
    head = random_head(model, ffn // 2, 1, 2)
    assert head.layers[0].fc1.out_features == ffn // 2
    assert len(head.refine_layers) == 1 and head.refine_layers[0].fc1.out_features == ffn // 2
    assert head.vocab_size == model.draft_head.vocab_size
    assert model.decoder.cfg.decoder.ffn_embed_dim == ffn
    assert model.draft_head.layers[0].fc1.out_features == ffn
    first_pass_only = random_head(model, ffn, 0, 0)
    assert len(first_pass_only.refine_layers) == 0


def test_the_heads_draft_graph_is_requantized_with_the_bits_asked(tmp_path):
    import onnx

    from benchmarks.draft_call_cost import requantized_drafts

    task, model = random_specdec_model(tmp_path)
    paths = requantized_drafts(model.eval(), task, ["8:64", "4:128"], tmp_path / "graphs")
    for (name, path), bits, block in zip(paths.items(), (8, 4), (64, 128)):
        assert f"{bits}-bit" in name
        attributes = [{a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
                      for node in onnx.load(str(path)).graph.node if node.op_type == "MatMulNBits"]
        assert attributes and all(a["bits"] == bits and a["block_size"] == block
                                  for a in attributes)
