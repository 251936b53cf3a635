"""The top-k sample certified on inexact logits (``decision/certified.py``).

Against brute force: the winner over the exact top k of exact logits plus
noise. The cases are built so that the first 16 exactly scored tokens are often
not enough: many tokens crowd the k-th, inexact logits are off by up to their
bound, some tokens are forbidden; a rule that trusts its first known set is
wrong on a share of them (held below), so each check is exercised.
"""

from __future__ import annotations

import numpy as np
import pytest

from nmt_specdec.decoding.decision import certified
from nmt_specdec.decoding.decision.certified import certified_sample, known_sample


def make_case(rng: np.random.Generator, vocab: int, forbidden: int):
    """(exact, inexact, bounds, noise): a peaked head, a crowded tail."""
    exact = rng.normal(0.0, 1.0, vocab)
    exact[: rng.integers(1, 6)] += rng.uniform(2.0, 8.0)  # a few likely tokens
    bounds = rng.uniform(0.2, 1.5, vocab).astype(np.float32)
    inexact = (exact + rng.uniform(-0.5, 0.5, vocab) * bounds).astype(np.float32)
    banned = rng.choice(vocab, forbidden, replace=False)
    exact[banned] = -np.inf
    inexact[banned] = -np.inf
    order = rng.permutation(vocab)  # the likely tokens anywhere
    return exact[order], inexact[order], bounds[order], rng.gumbel(size=vocab)


def brute_force(exact: np.ndarray, noise: np.ndarray, topk: int) -> int:
    members = np.argsort(-exact, kind="stable")[:topk]
    return int(members[np.argmax(exact[members] + noise[members])])


def first_known_winner(inexact, bounds, exact, noise, topk) -> int:
    """The mistake: the winner among the first 16 exactly scored tokens, unchecked."""
    known = np.argsort(-(inexact + bounds), kind="stable")[: max(16, 2 * topk)]
    members = known[np.argsort(-exact[known], kind="stable")[:topk]]
    return int(members[np.argmax(exact[members] + noise[members])])


@pytest.mark.parametrize("vocab, topk, forbidden", [(300, 10, 5), (300, 1, 0), (2000, 10, 40),
                                                    (2000, 3, 0), (40, 10, 33), (1000, 50, 0)])
def test_the_certified_sample_is_the_exact_top_k_sample(vocab, topk, forbidden):
    rng = np.random.default_rng(vocab * 100 + topk)
    wrong_unchecked = rounds = 0
    for _ in range(400):
        exact, inexact, bounds, noise = make_case(rng, vocab, forbidden)
        calls = []

        def score(ids):
            calls.append(ids.size)
            return exact[ids]

        token, value, drawn = certified_sample(inexact, bounds, score, lambda ids: noise[ids],
                                               topk)
        expected = brute_force(exact, noise, topk)
        assert token == expected
        assert value == exact[token] and drawn == noise[token]
        wrong_unchecked += first_known_winner(inexact, bounds, exact, noise, topk) != expected
        rounds += len(calls) > 1
    if vocab - forbidden > 16 + topk:  # else the first known set holds every allowed token
        assert rounds > 0
        assert wrong_unchecked > 0 or topk == 1  # the best token is always among the first


def test_forbidden_tokens_are_never_sampled_and_too_few_allowed_is_fine():
    rng = np.random.default_rng(5)
    exact, inexact, bounds, noise = make_case(rng, 500, 497)  # three tokens allowed
    token, _, _ = certified_sample(inexact, bounds, lambda ids: exact[ids],
                                   lambda ids: noise[ids], 10)
    assert np.isfinite(exact[token]) and token == brute_force(exact, noise, 10)


def test_the_shortlist_gives_way_to_the_whole_vocabulary(monkeypatch):
    # Every token crowds the k-th: the shortlist cannot rule the others out.
    monkeypatch.setattr(certified, "SHORTLIST", 20)
    rng = np.random.default_rng(9)
    for _ in range(50):
        exact = rng.normal(0.0, 0.05, 400)
        bounds = np.full(400, 1.0, dtype=np.float32)
        inexact = exact.astype(np.float32)
        noise = rng.gumbel(size=400)
        token, _, _ = certified_sample(inexact, bounds, lambda ids: exact[ids],
                                       lambda ids: noise[ids], 10)
        assert token == brute_force(exact, noise, 10)


def graph_like(exact: np.ndarray, inexact: np.ndarray, bounds: np.ndarray, use_ceiling: bool,
               candidates: int = 16):
    """What the certified projection returns for one position: the ``candidates``
    tokens with the highest upper bounds exact, the highest upper bound outside
    them as the ceiling (+inf: no ceiling, every check from the bounds)."""
    upper = inexact + bounds
    top = np.argsort(-upper, kind="stable")
    scores = inexact.copy()
    scores[top[:candidates]] = exact[top[:candidates]]
    return scores, upper[top[candidates]] if use_ceiling else np.inf


@pytest.mark.parametrize("topk", [3, 10])
def test_the_known_sample_is_the_exact_top_k_sample_or_none(topk):
    # The call's exact scores above its ceiling (64 candidates): where they hold
    # the top k, known_sample answers with brute force's token; elsewhere it
    # declines, and trusting the known tokens there is sometimes wrong.
    rng = np.random.default_rng(topk)
    answered = wrong_if_trusted = 0
    for _ in range(400):
        exact, inexact, bounds, noise = make_case(rng, 2000, 20)
        scores, ceiling = graph_like(exact, inexact, bounds, True, candidates=64)
        candidates = np.argsort(-(inexact + bounds), kind="stable")[:64]
        candidates = candidates[np.argsort(-scores[candidates], kind="stable")]  # best first
        found = known_sample(scores.astype(np.float32), candidates, ceiling, 1e-6,
                             lambda ids: exact[ids], lambda ids: noise[ids], topk)
        expected = brute_force(exact, noise, topk)
        if found is not None:
            answered += 1
            assert found == (expected, exact[expected], noise[expected])
            continue
        known = np.flatnonzero(scores > ceiling)
        members = known[np.argsort(-exact[known], kind="stable")[:topk]]
        if members.size:
            wrong_if_trusted += int(members[np.argmax(exact[members] + noise[members])]) != expected
    assert 20 < answered < 400 and wrong_if_trusted > 0


def test_the_known_sample_leaves_room_for_fp32_rounding():
    # The k-th known score lies above the ceiling, but by less than the rounding:
    # a token scored just below the ceiling in fp32 may lie above it exactly.
    scores = np.array([5.0, 3.0, 2.0005, 2.0, -1.0], dtype=np.float32)
    exact, noise = scores.astype(np.float64), np.zeros(5)
    args = (lambda ids: exact[ids], lambda ids: noise[ids], 3)
    candidates = np.arange(5)  # the best first
    assert known_sample(scores, candidates, 2.0, 1e-4, *args)[0] == 0
    assert known_sample(scores, candidates, 2.0, 1e-3, *args) is None
    assert known_sample(scores, candidates, 2.5, 0.0, *args) is None  # two tokens known: too few


def test_the_known_sample_declines_where_a_constraint_moved_a_candidate():
    # A forbidden token among the first k + 1 (its score -inf): the next
    # candidate, unread, might belong to the top k.
    exact, noise = np.array([5.0, 4.0, 3.0, 2.9, -1.0]), np.zeros(5)
    args = (lambda ids: exact[ids], lambda ids: noise[ids], 2)
    scores = exact.astype(np.float32)
    assert known_sample(scores, np.arange(5), 0.0, 0.0, *args)[0] == 0
    for forbidden in (0, 2):
        moved = scores.copy()
        moved[forbidden] = -np.inf
        assert known_sample(moved, np.arange(5), 0.0, 0.0, *args) is None


@pytest.mark.parametrize("use_ceiling", [True, False])
@pytest.mark.parametrize("beta, tau", [(1, 0.0), (3, 0.5), (5, 1.0), (10, 3.0)])
def test_relaxed_acceptance_decides_as_on_exact_scores(beta, tau, use_ceiling):
    # beta > 1 on inexact scores (decision/rules.py certify_host): each draft's
    # pass and each position's argmax as on the exact scores, drafts near the top
    # (where the test is close) and far from it.
    from nmt_specdec.decoding.decision.certified import Inexact
    from nmt_specdec.decoding.decision.rules import acceptance_rule

    rule, rng = acceptance_rule(beta, tau), np.random.default_rng(beta)
    mismatched_on_inexact = 0
    for _ in range(300):
        cases = [make_case(rng, 400, 3) for _ in range(4)]  # N = 4 positions
        exact = np.stack([c[0] for c in cases])
        bounds = np.stack([c[2] for c in cases])
        made = [graph_like(c[0], c[1], c[2], use_ceiling) for c in cases]
        inexact = np.stack([m[0] for m in made]).astype(np.float32)
        ceiling = np.array([m[1] for m in made])
        drafts = [int(np.argsort(-row)[rng.integers(0, 30)]) for row in exact[:3]]
        parents = [0, 1, 2]
        expected = rule.passes_host(exact.astype(np.float32), drafts, parents)
        mismatched_on_inexact += rule.passes_host(np.stack([c[1] for c in cases]), drafts,
                                                  parents) != expected
        flat = inexact.copy()
        rule.certify_host(flat, Inexact(ceiling, bounds.copy,
                                        lambda n, ids: exact[n, ids]), drafts, parents)
        assert rule.passes_host(flat, drafts, parents) == expected
        assert (flat.argmax(1) == exact.argmax(1)).all()
    assert mismatched_on_inexact > 0  # the 8-bit scores alone would decide otherwise


def test_near_noise_decides_clear_calls_and_the_noise_close_ones():
    scores = np.array([4.0, 4.0, 1.0, -2.0], dtype=np.float32)
    exact, calls = scores.astype(np.float64), []

    def noise(ids):
        calls.append(ids.size)
        return np.array([0.0, 1e-12, 0.0, 0.0])[ids]

    near = lambda ids: np.array([1e-12, 0.0, 0.0, 0.0])[ids]  # noqa: E731
    # Tokens 0 and 1 tie within 2 * NEAR: the noise breaks it (token 1), not near's.
    candidates = np.arange(4)
    assert known_sample(scores, candidates, 0.0, 0.0, lambda ids: exact[ids], noise, 2,
                        near)[0] == 1
    assert calls == [2]
    # A clear lead: near's draw alone.
    calls.clear()
    scores[1] = exact[1] = 3.0
    found = known_sample(scores, candidates, 0.0, 0.0, lambda ids: exact[ids], noise, 2, near)
    assert found == (0, 4.0, 1e-12) and calls == []
