"""The Spec-Verify engine: greedy (K=0) and SpecDec, its loops and what they share.

fairseq's incremental decoder scores one token per call through per-layer
dictionaries that grow by ``torch.cat``; speculative decoding needs several new
positions per call and a cache that can roll back. This package drives the
same weights directly. Everything at this level is shared by every backend:

- :mod:`.generator`: :class:`~.generator.SpecDecGenerator`, the generator
  fairseq gets: encode, length rules, then the batch's loop;
- :mod:`.loops`: the loops (batched in tensor ops; one sentence or a greedy
  batch deciding on the host), chosen per batch by :func:`~.loops.choose_loop`,
  and the steps they share (:mod:`.loops.steps`);
- :mod:`.decision`: what a turn decides (fairseq's constraints, Xia et al.'s
  Eq. 4, the commit, tree acceptance, scores), each rule once with its torch
  and host forms side by side;
- :mod:`.options`: K, beta, tau and fairseq's length rules; :mod:`.k_policy`:
  ``--spec-k N`` or ``auto``; :mod:`.generation_config`: what the engine does
  with each of fairseq's generation options (honoured or refused);
- :mod:`.cache`: the pre-allocated self-attention cache; roll-back moves each
  row's length, nothing is copied;
- :mod:`.drafters`: the :class:`~.drafters.Drafter` interface the loop sees;
- :mod:`.stats`: acceptance statistics;
- :mod:`.layout`: which fairseq decoder layouts the engine decodes.

The model math (the verifier and the draft head as lean passes, fairseq's
position numbering at explicit positions) is :mod:`.passes`, written once: the
torch backend runs it, the ONNX Runtime backend traces it. The model calls
(encode, verify N positions against the cache and the encoder memory, draft)
live in :mod:`.backends`: ``backends/base.py`` is the interface, and each
backend is one folder beside it (``torch/``, ``onnxruntime/``) that imports
this level and :mod:`.passes`, never another backend. :mod:`.replay` is
``--deterministic``: the fixed-shape verified replay and its pass.

Shapes: B active rows, N new positions, K draft slots, T cache slots, S source,
L layers, H heads, D head dim, C model dim, V vocabulary.
"""
