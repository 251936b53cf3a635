"""Deterministic mode (``--deterministic``): the fixed-shape verified replay.

- ``determinism``: the replay that re-derives each sentence's tokens in shapes
  that depend on that sentence alone, and the generator that wraps a fast path;
- ``replay_pass``: its verifier pass, several new positions on fairseq's own
  incremental state (torch only: not part of the backend interface);
- ``ragged``: cropping that state to each row's committed entries.
"""
