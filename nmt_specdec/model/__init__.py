"""The model's own parts, below the decoding engine (which imports them, never
the reverse):

- ``draft_head``: the non-autoregressive draft head (first pass and refinement);
- ``train_layers``: the head's layers as it trains them (each sentence's source
  projected once for all the blocks cut from it; cheaper attention and dropout);
- ``layer_options``: the fairseq decoder-layer options that the engine's passes
  and ``train_layers`` do not implement;
- ``draft_examples``: the cuts of a target sentence the head learns from;
- ``positions``: fairseq's position numbering at explicit positions (the head's
  training forward and every lean pass use it).
"""
