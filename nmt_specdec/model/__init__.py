"""The model's own parts, below the decoding engine (which imports them, never
the reverse):

- ``draft_head``: the non-autoregressive draft head (first pass and refinement);
- ``draft_examples``: the cuts of a target sentence the head learns from;
- ``positions``: fairseq's position numbering at explicit positions (the head's
  training forward and every lean pass use it).
"""
