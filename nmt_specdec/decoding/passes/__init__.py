"""The model math once, for every backend: the torch backend runs it eagerly, the
ONNX Runtime backend traces it into its graphs.

- ``layers``: a fairseq decoder layer's weights, fused, and one batch-first pass
  over new positions (``scaled_dot_product_attention``);
- ``verifier_pass`` / ``draft_pass``: the verifier and the draft head as lean
  passes that return hidden states;
- ``weights_watch``: whether the weights behind those lean copies changed.

Positions at explicit offsets are :mod:`nmt_specdec.model.positions`, below
this package (the draft head's training forward uses them too).
"""
