"""``benchmarks/lookup_drafts.py``: the target n-grams draft what most often
follows the longest suffix of the prefix they hold, the source copy drafts what
follows the prefix's suffix in the source, and a draft counts as accepted up to
its first token greedy does not take."""

import numpy as np
import pytest

from benchmarks.lookup_drafts import NgramStore, accepted, source_copy

EOS = 2


def store() -> NgramStore:
    # "could not open file" twice, "could not read file" once, each ending with EOS.
    return NgramStore([np.array([10, 11, 12, 13, EOS]), np.array([10, 11, 14, 13, EOS]),
                       np.array([10, 11, 12, 13, EOS]), np.array([20, 12, 15, EOS])], EOS)


def test_the_longest_suffix_found_decides_and_the_most_frequent_continuation_wins():
    ngrams = store()
    assert ngrams.continuation([EOS, 10, 11], 2) == [12, 13]  # 2 of 3 places
    # "20 12" is found: only what follows it there, not what follows 12 elsewhere.
    assert ngrams.continuation([EOS, 20, 12], 2) == [15, EOS]
    # A suffix not found backs off to a shorter one: 99 12 -> 12.
    assert ngrams.continuation([EOS, 99, 12], 1) == [13]
    # BOS is part of the history: a sentence start is looked up as one.
    assert ngrams.continuation([EOS], 1) == [10]
    assert ngrams.continuation([99], 2) is None


def test_the_store_refuses_what_its_keys_cannot_hold():
    with pytest.raises(ValueError):
        NgramStore([np.array([1 << 14, EOS])], EOS)
    with pytest.raises(ValueError):
        NgramStore([np.array([5, EOS])], EOS, max_n=5)


def test_the_source_copy_follows_the_last_place_of_the_longest_suffix():
    source = [30, 31, 32, 40, 31, 33, 34, EOS]
    assert source_copy(source, [EOS, 7, 31], 2) == [33, 34]  # the last 31
    assert source_copy(source, [EOS, 30, 31], 3) == [32, 40, 31]  # "30 31" beats "31"
    assert source_copy(source, [EOS, 34], 3) == [EOS]  # fewer than K left
    assert source_copy(source, [EOS, 99], 2) is None


def test_accepted_counts_up_to_the_first_miss():
    assert accepted([5, 6, 7], [5, 6, 8]) == 2
    assert accepted([4, 6], [5, 6]) == 0
    assert accepted([5], [5, 6]) == 1
    assert accepted(None, [5]) == 0
