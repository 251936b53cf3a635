"""The lean Spec-Verify engine: one decoding loop for greedy (K=0) and SpecDec.

fairseq's incremental decoder scores one token per call through per-layer
dictionaries that grow by ``torch.cat``; speculative decoding needs several new
positions per call and a cache that can roll back. This package drives the
same weights directly:

- :mod:`.layers`: a fairseq decoder layer's weights, fused, and one batch-first
  pass over new positions (``scaled_dot_product_attention``);
- :mod:`.cache`: the pre-allocated self-attention cache; roll-back moves each
  row's length, nothing is copied;
- :mod:`.verifier_pass` / :mod:`.draft_pass`: the verifier and the draft head as
  lean passes that return hidden states; vocabulary projections happen only
  where their scores are used (:mod:`.scoring`);
- :mod:`.loop`: draft -> verify -> accept -> commit -> bookkeep.

Shapes: B active rows, N new positions, K draft slots, T cache slots, S source,
L layers, H heads, D head dim, C model dim, V vocabulary.
"""
