"""The decision layer: what a Spec-Verify turn decides from the verifier's scores.

Every rule is written once, with its torch form (B rows in tensor ops, the
batched loop) beside its host form (numpy and Python ints, the loops that
decide on the host):

- :mod:`.constraints`: fairseq's length, pad and unk rules
  (:func:`~.constraints.constrain_logits_` / :func:`~.constraints.constrain_host_`)
  and the rarer search options (temperature, n-gram blocking, source length);
- :mod:`.rules`: the draft test, one object per rule (:class:`~.rules.ExactGreedy`,
  :class:`~.rules.TopBeta`), each with its torch and its host form; a new rule
  is one class there;
- :mod:`.acceptance`: the walk over a chain (to the first rejection, then the
  verifier's top-1) and the commit cut at EOS
  (:func:`~.acceptance.accept_drafts` and :func:`~.acceptance.commit_tokens` /
  :func:`~.acceptance.commit_host`);
- :mod:`.tree`: acceptance over a chain with leaves
  (:func:`~.tree.resolve_tree` / :func:`~.tree.accept_host`, which also takes chains);
- :mod:`.scores`: log-probabilities of committed tokens from raw logits, and
  when an 8-bit projection's bound certifies a decision;
- :mod:`.sampling` and :mod:`.draws`: sampling as beta = 1 on perturbed scores
  (the verifier's sampling distribution, exactly, whatever was drafted) and
  its batch-invariant noise.

``tests/unit/test_decision_forms.py`` holds each torch form equal to its host
form on random and tied scores. The layer imports nothing else of the engine.
"""
