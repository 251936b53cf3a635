"""``benchmarks/early_exit.py``: a chain drafter's iterations follow from where
its exit agrees with greedy: accepted up to its first disagreement (at most K),
plus the verifier's token; an exit that always agrees takes the oracle's."""

import math

from benchmarks.early_exit import chain_iterations


def test_an_exit_that_always_agrees_takes_the_oracles_iterations():
    for length in range(1, 12):
        for k in (1, 2, 4):
            assert chain_iterations([True] * length, k) == math.ceil(length / (k + 1))


def test_an_exit_that_never_agrees_takes_one_iteration_a_token():
    assert chain_iterations([False] * 7, 4) == 7


def test_a_disagreement_ends_the_chain_and_the_verifier_adds_its_token():
    # Position 0 agrees, 1 does not: the first iteration commits 0 and 1 (the
    # verifier's token); the second drafts from 2: 2 and 3 agree, K=2 caps them,
    # the verifier adds 4; the third commits 5 with the verifier's token.
    assert chain_iterations([True, False, True, True, True, False], 2) == 3
    assert chain_iterations([True, False, True, True, True, False], 4) == 2
