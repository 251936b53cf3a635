"""``--spec-k auto``: the K that maximises expected committed tokens per second."""

from __future__ import annotations

import pytest

from nmt_specdec.decoding.k_policy import RECHECK_TURNS, AcceptanceEstimate, AutoK, CostTable


def run_policy(policy: AutoK, accept: callable, limit: int = 8, batch: int = 1,
               turns: int = 200) -> list[int]:
    """Drives the policy: each turn, every row accepts ``accept(k)`` drafts."""
    chosen = []
    for _ in range(turns):
        k = policy.choose(limit, batch)
        policy.observe([accept(k)] * batch, k, seconds=policy.cost(k, batch) or 1.0)
        chosen.append(k)
    return chosen


def test_expected_tokens_from_scripted_counts():
    est = AcceptanceEstimate(slots=3, decay=1.0)
    # K=3 twice: one row accepts 3, the other 1 -> slot 1: 2/2, slot 2: 1/2, slot 3: 1/1.
    est.observe([3, 1], 3)
    # Prior: two iterations at the predecessor's c (slot 1: 1/2, i.e. Beta(1,1)):
    # c1 = (2 + 1) / 4 = 3/4, c2 = (1 + 2 * 3/4) / 4 = 5/8, c3 = (1 + 2 * 5/8) / 3 = 3/4.
    assert est.conditional() == pytest.approx([3 / 4, 5 / 8, 3 / 4])
    p1, p2 = 3 / 4, 3 / 4 * 5 / 8
    assert est.expected_tokens() == pytest.approx([1, 1 + p1, 1 + p1 + p2, 1 + p1 + p2 + p2 * 3 / 4])


def test_zero_acceptance_and_full_step_drafts_choose_zero():
    # Every drafted position costs a whole greedy step; nothing is ever accepted.
    policy = AutoK(8, cost=lambda k, batch: 1.0 + k)
    chosen = run_policy(policy, accept=lambda k: 0)
    assert chosen[-50:].count(0) >= 48  # but for a retry every 40 iterations


def test_oracle_drafter_chooses_the_largest_k():
    # Drafts cost a fifth of a step each and are always all accepted.
    policy = AutoK(8, cost=lambda k, batch: 1.0 + 0.2 * k)
    chosen = run_policy(policy, accept=lambda k: k)
    assert chosen[-50:].count(8) >= 48


def test_respects_the_limit():
    policy = AutoK(8, cost=lambda k, batch: 1.0 + 0.2 * k)
    assert set(run_policy(policy, accept=lambda k: k, limit=3)) <= {0, 1, 2, 3}


def test_measured_costs_pick_the_middle():
    # Each slot accepted with 0.8 once its predecessor was; a drafted token costs a
    # quarter of a step: (1 + .8 + .64 + ...) / (1 + .25 k) peaks at K = 3.
    rates = [(1 + sum(0.8 ** i for i in range(1, k + 1))) / (1 + 0.25 * k) for k in range(9)]
    best = max(range(9), key=rates.__getitem__)
    policy = AutoK(8, cost=lambda k, batch: 1.0 + 0.25 * k)
    policy.acceptance.reached = [1e6] * 8
    policy.acceptance.passed = [8e5] * 8
    assert policy.choose(8, 1) == best == 3


def test_cost_table_takes_the_median_of_recent_iterations():
    table = CostTable(window=3, min_count=2)
    assert table(3, 1) is None
    table.record(0, 1, 9.0)  # a first iteration at a K pays for first use: not trusted
    table.record(0, 1, 2.0)
    assert table(0, 1) is None  # one trusted iteration is not yet a measurement
    table.record(0, 1, 4.0)
    assert table(0, 1) == pytest.approx(3.0)
    table.record(0, 1, 50.0)  # a hiccup moves the median by one reading, not to 50
    assert table(0, 1) == pytest.approx(4.0)
    table.record(0, 1, 3.0)
    table.record(0, 1, 3.0)  # only the last three count
    assert table(0, 1) == pytest.approx(3.0)
    assert table(2, 1) is None  # greedy says nothing of a drafting K
    assert table(0, 32) is None  # another batch bucket


def drive(policy: AutoK, seconds, accept, turns: int) -> list[int]:
    """Batch 1 with the measured cost table: ``seconds(k, turn)`` per iteration."""
    chosen = []
    for turn in range(turns):
        k = policy.choose(4, 1)
        policy.observe([accept(k)], k, seconds=seconds(k, turn))
        chosen.append(k)
    return chosen


def test_auto_k_measures_every_k_instead_of_extrapolating_from_a_slow_start():
    # A quarter of the iterations accept nothing, the rest every draft; an
    # iteration costs 1 + 0.15 K, so K=4 wins (4 tokens in 1.6). K=1's first
    # iterations ran slow (a noisy neighbour): a line drawn from them priced
    # every drafting K out and auto decoded greedily for good.
    def seconds(k, turn):
        return 5.0 if k == 1 and turn < 12 else 1.0 + 0.15 * k
    pattern = [4, 4, 4, 0]  # accepted drafts, cycling
    turns = iter(range(10 ** 6))
    chosen = drive(AutoK(4), seconds, lambda k: min(pattern[next(turns) % 4], k), 300)
    assert set(chosen[:25]) == {0, 1, 2, 3, 4}  # each K measured early
    assert chosen[-100:].count(4) >= 95


def test_auto_k_retries_a_k_that_a_noisy_burst_priced_out():
    # K=2 is the best K, but its first measured iterations all ran 4x slow; the
    # retries measure it again and auto comes back to it.
    def seconds(k, turn):
        slow = k == 2 and turn < 40
        return (4.0 if slow else 1.0) * (1.0 + 0.3 * k)
    def accept(k):  # slot 1 always, slot 2 usually, later slots never
        return min(k, 2)
    chosen = drive(AutoK(4, retry_every=10), seconds, accept, 600)
    assert chosen[:20].count(2) >= 3  # K=2 measured in the burst, priced out...
    assert chosen[-100:].count(2) >= 85  # ... and back once retries measured it again


def test_auto_k_measures_greedy_instead_of_extrapolating_it():
    # A draft call costs a whole step before any slot (greedy 1.0, drafting 2.0 + 0.1 K)
    # and each slot is accepted half the time once its predecessor was: K=4 commits
    # 1.94 tokens in 2.4 (0.81 a unit of time), greedy 1 in 1. A line through the
    # drafting K would price greedy at 2.0 and never try it.
    policy = AutoK(4)
    # P(n >= j) = 2^-j, the long runs first (as a sentence's easy start would).
    geometric = [4, 3, 2, 2] + [1] * 4 + [0] * 8
    chosen = []
    for turn in range(300):
        k = policy.choose(4, 1)
        accepted = min(geometric[turn % len(geometric)], k)
        policy.observe([accepted], k, seconds=1.0 if k == 0 else 2.0 + 0.1 * k)
        chosen.append(k)
    assert 0 in chosen[:5]  # tried early, once something else was measured
    assert chosen[-100:].count(0) >= 95


def test_batch_arms_try_greedy_then_drafting_then_keep_the_faster():
    from nmt_specdec.decoding.arms import BatchArms

    arms = BatchArms(retry_every=4)
    tokens_per_second = {False: 100.0, True: 70.0}  # drafting loses, as at batch 32 on a CPU
    tried = []
    for _ in range(300):
        drafts = arms.drafts(32)
        tried.append(drafts)
        arms.record(32, drafts, tokens=int(tokens_per_second[drafts]), seconds=1.0)
    # Greedy, one drafting batch, greedy again; then greedy but for re-checks of
    # drafting, each that confirms greedy doubling the wait: 4 batches after the
    # third, then 8, 16 ...
    assert tried[:3] == [False, True, False]
    rechecks = [i for i, drafts in enumerate(tried) if drafts][1:]
    assert rechecks == [7, 16, 33, 66, 131, 260]
    assert not arms.drafts(8)  # another bucket starts again from greedy


def test_batch_arms_look_again_soon_when_a_recheck_changes_the_winner():
    from nmt_specdec.decoding.arms import BatchArms

    arms = BatchArms(retry_every=4, smoothing=1.0)  # an arm's rate: its last batch
    rate = {False: 100.0, True: 70.0}
    tried = []
    for batch in range(60):
        if batch == 20:  # drafting becomes the faster arm (longer sentences, say)
            rate[True] = 150.0
        drafts = arms.drafts(32)
        tried.append(drafts)
        arms.record(32, drafts, tokens=int(rate[drafts]), seconds=1.0)
    # The re-check at batch 33 finds drafting faster; from then on drafting runs,
    # with greedy re-checked 4 batches later, then 8, then 16.
    assert tried[21:33] == [False] * 12 and tried[33:38] == [True] * 5
    assert [i for i, drafts in enumerate(tried) if i > 33 and not drafts] == [38, 47]


def test_batch_arms_judge_drafting_against_greedy_batches_on_both_sides():
    # Batches come sorted by length, and a batch of longer sentences commits more
    # tokens per second whichever arm runs it. Drafting (0.8x greedy on the same
    # sentences) must not win against the one shorter greedy batch before it.
    from nmt_specdec.decoding.arms import BatchArms

    arms = BatchArms(retry_every=100)
    tried = []
    for batch in range(6):
        greedy_rate = 100.0 * (1 + 0.3 * batch)  # longer sentences, batch by batch
        drafts = arms.drafts(32)
        tried.append(drafts)
        arms.record(32, drafts, tokens=int(greedy_rate * (0.8 if drafts else 1.0)), seconds=1.0)
    assert tried == [False, True, False, False, False, False]


def test_batch_arms_keep_drafting_where_it_wins():
    from nmt_specdec.decoding.arms import BatchArms

    arms = BatchArms(retry_every=100)
    for _ in range(6):
        drafts = arms.drafts(4)
        arms.record(4, drafts, tokens=150 if drafts else 100, seconds=1.0)
    assert arms.drafts(4)


def test_auto_k_decodes_a_batch_greedily_until_drafting_has_proved_faster():
    policy = AutoK(4, cost=lambda k, batch: 1.0 + 0.1 * k)  # drafting looks cheap per turn
    policy.start_batch(32)
    assert policy.choose(4, 32) == 0 and not policy.wants_counts  # the first batch: greedy
    assert not policy.may_draft  # ... sized as greedy by the loop
    policy.end_batch(tokens=1000, seconds=1.0)
    policy.start_batch(32)
    assert policy.choose(4, 32) > 0 and policy.wants_counts  # the second: drafting
    policy.end_batch(tokens=700, seconds=1.0)  # ... which committed fewer tokens per second
    policy.start_batch(32)
    assert policy.choose(4, 32) == 0  # the third: greedy again, bracketing the second
    policy.end_batch(tokens=1200, seconds=1.0)
    policy.start_batch(32)
    assert policy.choose(4, 32) == 0  # greedy won
    policy.start_batch(1)  # a single row has arms of its own: its first sentence greedy,
    assert not policy.may_draft  # ... which measures greedy's per-sentence cost,
    policy.end_batch(tokens=5, seconds=5.0)
    policy.start_batch(1)
    assert policy.choose(4, 1) > 0  # ... then it drafts, whatever batches decided


def test_retries_back_off_while_the_best_k_stands():
    # Drafting never pays: retries are all the drafting auto does, and each one that
    # confirms greedy doubles the wait (40, 80, 160, ... 640): 6 in 2000 iterations.
    policy = AutoK(4, cost=lambda k, batch: 1.0 + k)
    chosen = run_policy(policy, accept=lambda k: 0, limit=4, turns=2000)
    retries = [turn for turn, k in enumerate(chosen) if k != 0]
    assert 4 <= len(retries) <= 8
    assert retries[1] - retries[0] < retries[-1] - retries[-2]


def test_a_greedy_batch_times_k0_so_the_drafting_batch_drafts_at_once():
    # The drafting arm's batch used to spend its first iterations measuring K=0 (and on
    # a short batch, most of them): its rate then said little about drafting.
    policy = AutoK(4)
    policy.start_batch(32)
    for _ in range(5):  # the first batch: greedy, its iterations timed
        assert policy.choose(4, 32) == 0
        policy.observe([], 0, 1.0)
    policy.end_batch(tokens=160, seconds=5.0)
    assert policy.table(0, 32) == 1.0
    policy.start_batch(32)
    assert policy.may_draft and policy.choose(4, 32) == 1


def greedy_cheaper(policy: AutoK) -> bool:
    """Whether greedy commits a token of one row for less than the best drafting K."""
    greedy, drafting = policy.per_token()
    return greedy <= drafting


def run_sentences(policy: AutoK, seconds, accept, sentences: int, turns: int = 10,
                  source_length: int = 0):
    """Batch 1, sentence by sentence: ``turns`` iterations each, ``seconds(k)`` and
    ``accept(k)`` drafts committed per iteration. Returns per sentence whether it
    drafted and the K chosen per turn."""
    log = []
    for _ in range(sentences):
        policy.start_batch(1, source_length)
        chosen = []
        for _ in range(turns):
            k = policy.choose(4, 1)
            policy.observe([accept(k)] if policy.wants_counts else [], k, seconds(k))
            chosen.append(k)
        policy.end_batch(tokens=turns, seconds=sum(map(seconds, chosen)))
        log.append((policy.may_draft, chosen))
    return log


def test_one_row_settles_greedy_and_rechecks_ever_more_rarely():
    # Drafting never pays: each drafted token costs a whole step and none is accepted.
    policy = AutoK(4, cost=lambda k, batch: 1.0 + k)
    log = run_sentences(policy, lambda k: 1.0 + k, lambda k: 0, 5000)
    drafting = [i for i, (drafts, _) in enumerate(log) if drafts]
    # The first sentence is greedy (greedy's per-sentence cost), the second drafts
    # (the injected costs are known at once) and finds greedy cheaper; after 16
    # greedy sentences a re-check, then 32, 64, ... (no cap).
    assert drafting == [1, 18, 51, 116, 245, 502, 1015, 2040, 4089]
    assert len(drafting[1:]) <= 12
    assert all(not any(chosen) for drafts, chosen in log if not drafts)  # greedy is K=0
    # A re-check drafts every slot for its first iterations (so that each one's
    # acceptance is measured anew), though K=1 is the drafting K that would pay
    # best; then it drafts at K=1 (but for a retry): its verdict rests on K=1's cost.
    for _, chosen in (log[i] for i in drafting[1:]):
        assert chosen[:RECHECK_TURNS] == [4] * RECHECK_TURNS
        assert sum(k != 1 for k in chosen[RECHECK_TURNS:]) <= 1


def test_one_row_settles_greedy_from_measured_costs():
    # The cost table: every K is measured (four iterations each) before a verdict.
    policy = AutoK(4)
    log = run_sentences(policy, lambda k: 1.0 + 0.5 * k, lambda k: 0, 2000)
    drafting = [i for i, (drafts, _) in enumerate(log) if drafts]
    # One greedy sentence, then 20 iterations of measuring (a sentence's first
    # iteration is a per-sentence cost, not timed as K's): two sentences; then
    # re-checks after 16, 32, ...
    assert drafting == [1, 2, 19, 52, 117, 246, 503, 1016]
    assert sum(chosen.count(0) for _, chosen in log) >= 0.99 * 2000 * 10


def test_one_row_keeps_drafting_where_drafting_pays():
    # Every draft accepted, a drafted token a fifth of a step: K=4 commits 5 in 1.8.
    policy = AutoK(4)
    log = run_sentences(policy, lambda k: 1.0 + 0.2 * k, lambda k: k, 500)
    assert not log[0][0] and all(drafts for drafts, _ in log[1:])
    assert sum(chosen.count(4) for _, chosen in log[-100:]) >= 0.95 * 100 * 10


def test_one_row_goes_back_to_drafting_when_a_recheck_finds_it_pays():
    # The drafter is perfect throughout; drafting is too slow to pay until sentence
    # 100, then cheap (a faster drafter, say): greedy sentences do not time drafting,
    # so the next re-check sees it, and from then on every sentence drafts.
    cost = {"per_draft": 2.0}

    def seconds(k):
        return 1.0 + cost["per_draft"] * k

    policy = AutoK(4)
    first = run_sentences(policy, seconds, lambda k: k, 100)
    rechecks = [i for i, (drafts, _) in enumerate(first) if drafts][2:]
    assert rechecks == [19, 52]  # after 16 and 32 greedy sentences
    cost["per_draft"] = 0.2
    then = run_sentences(policy, seconds, lambda k: k, 100)
    back = 52 + 64 + 1 - 100  # the next re-check, after 64 greedy sentences
    assert [drafts for drafts, _ in then[:back]] == [False] * back
    assert all(drafts for drafts, _ in then[back:])


def test_a_recheck_measures_the_slots_an_early_verdict_wrote_off():
    # A draft call costs a whole step, whatever K, so only a long accepted chain
    # pays (K=1: 2 tokens in 2.2 steps; K=4: 5 in 2.8). In the first sentences
    # only slot 1 is ever accepted (as in the shortest sentences of a sorted test
    # set): greedy wins. Then every draft is. A re-check at the K the estimates
    # favour (K=1) would learn slot 1 alone and find greedy faster for good; a
    # re-check of every slot sees K=4 pay and drafting resumes.
    def seconds(k):
        return 1.0 if k == 0 else 2.0 + 0.2 * k

    policy = AutoK(4)
    early = run_sentences(policy, seconds, lambda k: min(k, 1), 30)
    assert not any(drafts for drafts, _ in early[-10:])
    later = run_sentences(policy, seconds, lambda k: k, 120)
    assert all(drafts for drafts, _ in later[-20:])
    assert sum(chosen.count(4) for _, chosen in later[-20:]) >= 0.9 * 20 * 10


class _Counting:
    """An injected cost that counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, k, batch):
        self.calls += 1
        return 1.0 + k


def test_a_greedy_sentence_costs_the_policy_nothing_per_iteration():
    cost = _Counting()
    policy = AutoK(4, cost=cost)
    run_sentences(policy, lambda k: 1.0 + k, lambda k: 0, 3)  # settled on greedy
    policy.start_batch(1)
    assert not policy.may_draft and not policy.wants_counts  # sized as greedy, no counts read
    calls, reached = cost.calls, list(policy.acceptance.reached)
    for _ in range(50):
        assert policy.choose(4, 1) == 0
        policy.observe([], 0, 1.0)
    assert cost.calls == calls  # no estimates computed
    assert policy.acceptance.reached == reached  # nothing learned, not even forgetting
    policy.end_batch(tokens=50, seconds=50.0)


def test_a_greedy_sentence_keeps_greedys_cost_current():
    # K=0 was measured fast while exploring (a lucky 0.8 for a step that costs
    # 1.0); drafting at K=4 commits 5 tokens in 4.5 steps, 1.11x greedy's real
    # rate, 0.89x the lucky one. Greedy sentences time their steps as K=0's, so
    # the next re-check compares drafting with greedy's current cost, and drafts.
    step = {"seconds": 0.8}

    def seconds(k):
        return step["seconds"] if k == 0 else 1.0 + 0.875 * k

    policy = AutoK(4)
    run_sentences(policy, seconds, lambda k: k, 3)
    assert greedy_cheaper(policy)  # against the lucky reading
    step["seconds"] = 1.0
    log = run_sentences(policy, seconds, lambda k: k, 40)
    assert policy.table(0, 1) == pytest.approx(1.0)
    assert all(drafts for drafts, _ in log[-10:])
    assert not greedy_cheaper(policy)


def test_auto_k_leaves_larger_k_unmeasured_once_drafting_loses_more_with_k():
    # Compute-bound (batch 32 on a CPU): each verified position costs 0.9 of a step,
    # and 70% of drafts are accepted. K=1 and K=2 lose to greedy, K=2 more than K=1,
    # so K=3 and 4 (slower still) are not measured; retries try them later.
    def accept(k):
        return min(k, 2) if accept.turn % 10 < 7 else 0
    accept.turn = 0
    policy, chosen = AutoK(4), []
    for _ in range(39):  # before the first retry
        k = policy.choose(4, 32)
        policy.observe([accept(k)] * 32, k, seconds=1.0 + 0.9 * k)
        accept.turn += 1
        chosen.append(k)
    assert set(chosen) == {0, 1, 2}
    assert chosen[-20:].count(0) == 20
    # Where K=2 loses less than K=1 (acceptance grows with K), K=3 is measured.
    policy, chosen = AutoK(4), []
    for _ in range(39):
        k = policy.choose(4, 32)
        policy.observe([k] * 32, k, seconds=1.0 + 0.7 * k + (0.5 if k == 1 else 0))
        chosen.append(k)
    assert 3 in chosen


def test_one_row_measures_every_k_even_where_early_ones_lose_more_with_k():
    # Every draft accepted, but K=1 and K=2 lose to greedy (K=2 more than K=1,
    # as noisy early estimates had it for the verifier's 8-bit copy) while K=4
    # commits 5 tokens in 3.6 steps: one row still measures K=3 and 4 and drafts
    # at K=4; a batch of 32 with the same costs stops at K=2 (the test above).
    seconds = {0: 1.0, 1: 2.2, 2: 3.3, 3: 3.5, 4: 3.6}
    for batch, measured in ((1, True), (32, False)):
        policy, chosen = AutoK(4), []
        for _ in range(39):
            k = policy.choose(4, batch)
            policy.observe([k] * batch, k, seconds=seconds[k])
            chosen.append(k)
        assert (4 in chosen) == measured
        if measured:
            assert chosen[-10:] == [4] * 10
            assert not greedy_cheaper(policy)


def test_slots_not_drafted_keep_what_was_learned_of_them():
    # 50 iterations at K=4 with every draft accepted, then 200 at K=2: slots 3
    # and 4 were not drafted since, so their acceptance stays about what K=4
    # showed (only their prior follows slot 2's new estimate).
    est = AcceptanceEstimate(slots=4)
    for _ in range(50):
        est.observe([4], 4)
    assert min(est.conditional()) > 0.95
    for _ in range(200):
        est.observe([1], 2)  # slot 1 accepted, slot 2 rejected
    after = est.conditional()
    assert after[2] > 0.9 and after[3] > 0.9
    assert after[1] < 0.2  # slot 2, drafted all along, learned its rejections


def _arms_log(lengths, per_token, overheads=(0.0, 4.0)):
    """SentenceArms over sentences of ``lengths`` source tokens, each ``length``
    output tokens, with fixed seconds per token (greedy, best drafting K) and
    per-sentence costs (greedy, drafting): which sentences drafted."""
    from nmt_specdec.decoding.arms import SentenceArms

    arms, drafted = SentenceArms(), []
    for i, length in enumerate(lengths):
        drafts = arms.drafts(length, per_token)
        arms.record(drafts, length, overheads[drafts], per_token)
        if drafts:
            drafted.append(i)
    return drafted


def test_short_sentences_decode_greedily_where_long_ones_draft():
    # Drafting saves a fifth of a step a token and costs 4 steps a sentence: it pays
    # from 20 tokens on. Sorted shortest first, as fairseq feeds them.
    lengths = [1 + i // 10 for i in range(400)]  # 1 to 40 tokens
    drafted = _arms_log(lengths, per_token=(1.0, 0.8))
    assert drafted[0] == 1  # the first sentence is greedy, the second measures drafting
    assert all(i in drafted for i, length in enumerate(lengths) if length > 20)
    rechecks = [i for i in drafted[1:] if lengths[i] < 20]
    assert len(rechecks) <= 4  # after 16, 32, 64 greedy sentences
    assert not any(i in drafted for i, length in enumerate(lengths) if length == 20)


def test_a_shuffled_stream_rechecks_rarely():
    import random

    rng = random.Random(3)
    lengths = [rng.randint(1, 40) for _ in range(2000)]
    drafted = _arms_log(lengths, per_token=(1.0, 1.2))  # drafting never pays
    # The first drafting sentence, then re-checks after 16, 32, 64, ...: 7 in 2000.
    assert len(drafted) <= 1 + 7


def test_a_drafting_sentences_own_cost_keeps_short_sentences_greedy():
    # Per iteration drafting pays: K=1 commits 2 tokens in 1.6 steps. But a sentence
    # that drafts costs 3 steps more (the draft head's source keys/values, a dearer
    # first iteration), and the sentences are 3 tokens long: greedy takes 3 steps,
    # drafting 2 iterations (3.2 steps) plus 3. Only the sentences that measure
    # and re-checks draft; judged per iteration alone, every sentence drafted.
    def seconds(k):
        return 1.0 if k == 0 else 1.6 + 0.6 * (k - 1)

    policy, drafted = AutoK(4), []
    for sentence in range(300):
        policy.start_batch(1, source_length=3)
        chosen, committed = [], 0
        while committed < 3:  # slot 1 always accepted, later slots never
            k = policy.choose(4, 1)
            policy.observe([min(k, 1)] if policy.wants_counts else [], k, seconds(k))
            chosen.append(k)
            committed += 1 + min(k, 1)
        policy.end_batch(tokens=3, seconds=sum(map(seconds, chosen)) + 3.0 * policy.may_draft)
        if policy.may_draft:
            drafted.append(sentence)
    # Two greedy sentences (K=0 measured), 16 that measure K=1..4 (one timed
    # iteration each: a sentence's first is its own cost), then re-checks after
    # 16, 32, 64, 128 greedy sentences.
    assert len(drafted) <= 16 + 4 + 1
    assert drafted[0] == 2 and len([s for s in drafted if s > 100]) <= 2


def test_a_verdict_for_greedy_holds_as_every_k_costs_more_with_length():
    # Sorted shortest first: every iteration costs more as the sentences grow (3x
    # over the stream, sources of 1 to 100 tokens), K=1 always 2.2 greedy steps for
    # 2 tokens, so greedy wins by 10% throughout. Drafting costs measured on the
    # first, shortest sentences and compared with greedy's of the long ones would
    # make drafting look 2.7x faster at the end; compared within a source-length
    # context (powers of two), they do not.
    scale = {"now": 1.0}

    def seconds(k):
        return scale["now"] * (1.0 if k == 0 else 2.2 + 0.5 * (k - 1))

    policy, log, contexts = AutoK(4), [], []
    for sentence in range(400):
        scale["now"] = 1.0 + 2.0 * sentence / 400
        log += run_sentences(policy, seconds, lambda k: min(k, 1), 1,
                             source_length=1 + sentence // 4)
        contexts.append(policy.table.context)
    drafting = [i for i, (drafts, _) in enumerate(log) if drafts]
    assert drafting[:2] == [1, 2]  # after a greedy one, two sentences measure every K
    # A new context's first sentence measures K=0 there and the drafting K the
    # context before priced best (K=1: three timed iterations), the others priced
    # from there; else re-checks only: after 16, 32, 64, 128 sentences.
    firsts = [i for i in range(1, 400) if contexts[i] != contexts[i - 1]]
    assert len(firsts) == 6
    assert all(set(log[i][1]) == {0, 1} and log[i][1].count(1) == 3 for i in firsts)
    assert len(drafting) <= 2 + len(firsts) + 5
    assert sum(k > 0 for _, chosen in log[-100:] for k in chosen) <= 3 * 10


def test_cost_table_compares_readings_within_a_context():
    table = CostTable(window=3, min_count=2)
    table.context = CostTable.context_of(5)
    for seconds in (9.0, 1.0, 1.0):  # the first is not trusted
        table.record(0, 1, seconds)
    for seconds in (9.0, 2.0, 2.0):
        table.record(2, 1, seconds)
    assert (table(0, 1), table(2, 1)) == (1.0, 2.0)
    table.context = CostTable.context_of(40)  # longer sources: K=0 measured anew
    assert table(0, 1) is None and table(2, 1) is None
    for _ in range(2):
        table.record(0, 1, 1.5)
    # K=2 not read here yet: its ratio where it was (2x K=0) at K=0's cost here.
    assert (table(0, 1), table(2, 1)) == (1.5, 3.0)
    for _ in range(2):
        table.record(2, 1, 2.4)  # read here: 1.6x
    assert table(2, 1) == pytest.approx(2.4)
    table.context = CostTable.context_of(7)  # 4-7 tokens: the first context again
    assert (table(0, 1), table(2, 1)) == (1.0, 2.0)
    table.context = CostTable.context_of(20)  # between the two: the nearer's ratio
    for _ in range(2):
        table.record(0, 1, 1.2)
    assert table(2, 1) == pytest.approx(1.2 * 1.6)


def test_cost_table_prices_drafting_k_on_one_curve():
    # Drafting K's medians lie off a + b sqrt(K) by noise; the estimates lie on it.
    table = CostTable(window=3, min_count=2)
    true = {k: 1.0 + 0.5 * k ** 0.5 for k in range(1, 5)}
    noise = {1: 0.1, 2: -0.1, 3: 0.1, 4: -0.1}
    for k in range(5):
        for _ in range(3):
            table.record(k, 1, true.get(k, 0.7) + noise.get(k, 0.0))
    greedy, *drafting = table.estimates(4, 1)
    assert greedy == pytest.approx(0.7)  # K=0 is its own median
    medians = [table(k, 1) for k in range(1, 5)]
    assert medians == pytest.approx([true[k] + noise[k] for k in range(1, 5)])
    slopes = [(drafting[i + 1] - drafting[i]) / ((i + 2) ** 0.5 - (i + 1) ** 0.5)
              for i in range(3)]
    assert slopes == pytest.approx([slopes[0]] * 3)  # on one curve
    assert max(abs(drafting[k - 1] - true[k]) for k in true) < 0.1  # nearer than the medians


def test_cost_table_prices_a_drafting_k_against_greedys_cost_now():
    # Within a context the sentences still grow: a drafting K's readings are kept
    # relative to K=0's cost when taken and priced at K=0's cost now.
    table = CostTable(window=3, min_count=2)
    for seconds in (9.0, 1.0, 1.0):  # the first is not trusted
        table.record(0, 1, seconds)
    for seconds in (9.0, 2.0, 2.0):
        table.record(2, 1, seconds)  # 2x greedy's cost at the time
    assert table(2, 1) == pytest.approx(2.0)
    for _ in range(3):
        table.record(0, 1, 1.5)  # the sentences grew: greedy costs 1.5 now
    assert table(0, 1) == pytest.approx(1.5)
    assert table(2, 1) == pytest.approx(3.0)  # still 2x greedy's
    table.record(2, 1, 2.4)  # measured again: 1.6x greedy's now
    assert table(2, 1) == pytest.approx(3.0)  # the median ratio: 2x
    table.record(2, 1, 2.4)
    assert table(2, 1) == pytest.approx(2.4)  # now 1.6x


def test_kept_estimates_and_expected_tokens_follow_every_new_reading():
    table = CostTable(window=3, min_count=2)
    for seconds in (9.0, 1.0, 1.0):
        table.record(0, 1, seconds)
    for seconds in (9.0, 2.0, 2.0):
        table.record(2, 1, seconds)
    assert table.estimates(2, 1) == [1.0, None, 2.0]
    table.estimates(2, 1)[2] = 5.0  # a caller's list is its own
    table.record(2, 1, 3.5)
    table.record(2, 1, 3.5)
    assert table.estimates(2, 1) == [1.0, None, 3.5]  # the median of 2.0, 3.5 and 3.5
    table.context = CostTable.context_of(40)  # another context: nothing read there
    assert table.estimates(2, 1) == [None, None, None]
    acceptance = AcceptanceEstimate(2)
    before = acceptance.expected_tokens()
    acceptance.observe([2], 2)
    assert acceptance.expected_tokens()[2] > before[2]
