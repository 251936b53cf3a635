"""nmt-specdec: speculative mask-predict decoding for fairseq Transformers.

This package holds the algorithm: the decoding engine (:mod:`.decoding`, with
the model calls per backend in :mod:`.decoding.backends`), the draft head,
determinism, data recipes, workflows and evaluation. It never imports
``fairseq_plugins``; the plugin imports from here.
"""

__version__ = "0.1.0"
