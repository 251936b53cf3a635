"""What ``--spec-k auto``'s own bookkeeping costs an iteration, without a model: a probe.

Auto decides every iteration in Python (:class:`~nmt_specdec.decoding.k_policy.AutoK`):
``choose`` prices each K and picks one, ``observe`` records the iteration, and a
sentence's ``start_batch`` and ``end_batch`` weigh drafting against greedy. This
drives the policy through simulated sentences at batch 1 (source lengths drawn
from the gettext test split's range, each slot accepted with ``--acceptance``
once its predecessor was, an iteration costing ``10 ms * (1 + 0.4 sqrt(K))``
with a deterministic wobble) and prints the microseconds each call takes and the
K it chose, so that two versions of the policy can be compared on the same
sequence (the same K counts: the same decisions)::

    python benchmarks/auto_bookkeeping.py --sentences 500 --max-k 4
"""

from __future__ import annotations

import argparse
import collections
import random
import time

from nmt_specdec.decoding.k_policy import AutoK

SOURCE_LENGTHS = (2, 3, 5, 8, 12, 20, 40)


def simulate(sentences: int, max_k: int, acceptance: float, turns: int, seed: int):
    """(microseconds per choose, per observe, per sentence's start and end, K counts)."""
    rng = random.Random(seed)
    policy = AutoK(max_k)
    spent = collections.Counter()
    chosen = collections.Counter()

    def timed(name, call, *args):
        start = time.perf_counter()
        result = call(*args)
        spent[name] += time.perf_counter() - start
        return result

    for sentence in range(sentences):
        timed("sentence", policy.start_batch, 1, rng.choice(SOURCE_LENGTHS))
        for _ in range(turns):
            k = timed("choose", policy.choose, max_k, 1)
            chosen[k] += 1
            accepted = 0
            while accepted < k and rng.random() < acceptance:
                accepted += 1
            seconds = 0.01 * (1 + 0.4 * k ** 0.5) * (1 + (sentence % 37) / 100)
            timed("observe", policy.observe, [accepted], k, seconds)
        timed("sentence", policy.end_batch, turns, 0.01 * turns)
    iterations = sentences * turns
    return (1e6 * spent["choose"] / iterations, 1e6 * spent["observe"] / iterations,
            1e6 * spent["sentence"] / sentences, chosen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--max-k", type=int, default=4)
    parser.add_argument("--acceptance", type=float, default=0.7,
                        help="a slot's chance to be accepted once its predecessor was")
    parser.add_argument("--turns", type=int, default=6, help="iterations a sentence")
    parser.add_argument("--repeats", type=int, default=3, help="the fastest of these")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    runs = [simulate(args.sentences, args.max_k, args.acceptance, args.turns, args.seed)
            for _ in range(args.repeats)]
    choose, observe, sentence, chosen = min(runs, key=lambda run: run[0] + run[1])
    print("| µs a choose | µs an observe | µs a sentence's start and end | K chosen (iterations) |")
    print("|---:|---:|---:|---|")
    counts = ", ".join(f"K={k}: {n}" for k, n in sorted(chosen.items()))
    print(f"| {choose:.1f} | {observe:.1f} | {sentence:.1f} | {counts} |")


if __name__ == "__main__":
    main()
