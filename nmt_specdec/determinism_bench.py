"""How batch-dependent is translation, and what does --deterministic cost?

For one checkpoint and a binarized test split, decodes the whole split with
fairseq's own batching (``task.get_batch_iterator``, as ``fairseq-generate``)
at several batch sizes and counts sentences whose tokens differ from the
batch-1 output, for: stock greedy ``SequenceGenerator``, SpecDec beta=1, and
both again with ``--deterministic``. Then times deterministic vs plain at one
batch size (median of repeats) and reports the share of recomputed tokens.
"""

from __future__ import annotations

import statistics
import time
from typing import Dict, List, Sequence

import torch
from fairseq.dataclass.configs import GenerationConfig

MODES = {  # name -> (spec_decoding, deterministic)
    "stock greedy": (False, False),
    "SpecDec beta=1": (True, False),
    "stock greedy --deterministic": (False, True),
    "SpecDec beta=1 --deterministic": (True, True),
}


def load(checkpoint: str, data: str, split: str):
    """(model, task) with the split loaded; checkpoints load through the safe loader."""
    import fairseq_plugins  # noqa: F401  (weights-only loading, task registration)
    from fairseq import checkpoint_utils

    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [checkpoint], arg_overrides={"data": data})
    task.load_dataset(split)
    return models[0].eval(), task


def build(task, model, mode: str, gen_args: GenerationConfig):
    task.cfg.spec_decoding, task.cfg.deterministic = MODES[mode]
    return task.build_generator([model], gen_args)


def decode(task, model, generator, split: str, batch_size: int,
           max_sentences: int | None = None) -> Dict[int, List[int]]:
    """Sentence id -> output tokens, batched as fairseq-generate batches."""
    dataset = task.dataset(split)
    iterator = task.get_batch_iterator(
        dataset=dataset, max_sentences=batch_size, required_batch_size_multiple=1,
        max_positions=(10 ** 6, 10 ** 6), ignore_invalid_inputs=False, seed=1,
    ).next_epoch_itr(shuffle=False)
    outputs = {}
    for sample in iterator:
        keep = sample["id"] < max_sentences if max_sentences else None
        if keep is not None and not keep.any():
            continue
        hypos = generator.generate([model], sample)
        for sid, hypo in zip(sample["id"].tolist(), hypos):
            if not max_sentences or sid < max_sentences:
                outputs[sid] = hypo[0]["tokens"].tolist()
    return outputs


def count_differences(a: Dict[int, List[int]], b: Dict[int, List[int]]) -> int:
    return sum(a[i] != b[i] for i in a)


def batch_dependence(task, model, gen_args, split: str, batch_sizes: Sequence[int],
                     modes: Sequence[str], max_sentences: int | None) -> List[dict]:
    """Per mode: differing sentences at each batch size vs the first batch size."""
    rows = []
    for mode in modes:
        generator = build(task, model, mode, gen_args)
        runs = {bs: decode(task, model, generator, split, bs, max_sentences)
                for bs in batch_sizes}
        base = runs[batch_sizes[0]]
        rows.append({"mode": mode, "sentences": len(base),
                     "differ": {bs: count_differences(base, runs[bs]) for bs in batch_sizes[1:]}})
    return rows


def overhead(task, model, gen_args, split: str, batch_size: int, repeats: int,
             max_sentences: int | None) -> List[dict]:
    """Median wall time of each deterministic mode relative to its plain fast path."""
    results = []
    for plain, det in ((m, m + " --deterministic") for m in ("stock greedy", "SpecDec beta=1")):
        times = {plain: [], det: []}
        generators = {name: build(task, model, name, gen_args) for name in times}
        for _ in range(repeats + 1):  # the first round warms up
            for name, generator in generators.items():
                start = time.perf_counter()
                decode(task, model, generator, split, batch_size, max_sentences)
                times[name].append(time.perf_counter() - start)
        replay = generators[det].replay.stats
        share = replay.recomputed / max(replay.tokens, 1)
        plain_s, det_s = (statistics.median(times[n][1:]) for n in (plain, det))
        results.append({"mode": det, "batch_size": batch_size, "plain_s": plain_s,
                        "deterministic_s": det_s, "ratio": det_s / plain_s,
                        "recomputed_share": share})
    return results


def markdown(dependence: List[dict], costs: List[dict], batch_sizes: Sequence[int]) -> str:
    head = " | ".join(f"differ @ bs {bs}" for bs in batch_sizes[1:])
    lines = [f"| mode | sentences | {head} |", "|---" * (2 + len(batch_sizes[1:])) + "|"]
    for row in dependence:
        cells = " | ".join(str(row["differ"][bs]) for bs in batch_sizes[1:])
        lines.append(f"| {row['mode']} | {row['sentences']} | {cells} |")
    lines += ["", "| mode | batch | plain s | deterministic s | ratio | recomputed tokens |",
              "|---|---|---|---|---|---|"]
    for c in costs:
        lines.append(f"| {c['mode']} | {c['batch_size']} | {c['plain_s']:.2f} | "
                     f"{c['deterministic_s']:.2f} | {c['ratio']:.2f}x | "
                     f"{100 * c['recomputed_share']:.2f}% |")
    return "\n".join(lines) + "\n"


def gen_config(max_len_a: float, max_len_b: int) -> GenerationConfig:
    return GenerationConfig(beam=1, max_len_a=max_len_a, max_len_b=max_len_b)


def set_threads(threads: int) -> None:
    torch.set_num_threads(threads)
