"""Where does a greedy batch's time go, against CTranslate2's, batch by batch?

The main run's batch-32 rows compare whole passes. This script decodes the same
batches with the engine's greedy (``--spec-k 0``) and with CTranslate2 greedy
(the converted verifier, as ``nmt-specdec-evaluate --ct2``), alternating batch by
batch, and keeps each batch's fastest of ``--repeats``. Per batch shape (rows x
source length, fairseq's batches of sentences sorted by length) it prints both
times and their ratio, and splits the engine's time into the encoder call, the
verify calls (binding included), dropping finished rows, and the rest (the
loop's host work, building the batch, fairseq's hypotheses). Columns are
milliseconds.

It takes the evaluation's options (``nmt-specdec-evaluate --help``: checkpoint,
test set, lengths, ``--batch-sizes`` (the first), ``--backend`` (the first),
``--int8``, ``--threads``) beside its own. Example (from the repository root,
``work/gettext-heldout/raw`` from the README's quickstart)::

    python benchmarks/batch_split.py --checkpoint models/gettext-de-en-tiny/model.pt \\
        --data models/gettext-de-en-tiny --spm-model models/gettext-de-en-tiny/spm.model \\
        --src-file work/gettext-heldout/raw/test.de --ref-file work/gettext-heldout/raw/test.en \\
        --first-sentences 500 --max-len-a 1.2 --max-len-b 10 --batch-sizes 32 \\
        --backend onnxruntime --threads 1 --out /tmp/batch_split --repeats 5
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt_specdec import logs  # noqa: E402
from nmt_specdec.evaluation import cli  # noqa: E402

PARTS = ("encoder", "verify", "drop rows")


@contextmanager
def clocked(spent: Dict[str, float]) -> Iterator[None]:
    """Adds the seconds spent in the engine's encoder calls, verify calls and row
    drops to ``spent`` while inside (class methods wrapped, restored after)."""
    from nmt_specdec.decoding.backends.base import Backend, VerifierCalls
    from nmt_specdec.decoding.cache import StaticKVCache

    targets = [(StaticKVCache, "keep_rows", "drop rows")]
    for base, method, part in ((Backend, "encode", "encoder"), (VerifierCalls, "verify", "verify"),
                               (VerifierCalls, "keep_rows", "drop rows")):
        targets += [(cls, method, part) for cls in _subclasses(base) if method in vars(cls)]
    originals = [(cls, method, vars(cls)[method]) for cls, method, _ in targets]

    def timed(function, part):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[part] += time.perf_counter() - start
        return wrapper

    for (cls, method, part), (_, _, function) in zip(targets, originals):
        setattr(cls, method, timed(function, part))
    try:
        yield
    finally:
        for cls, method, function in originals:
            setattr(cls, method, function)


def _subclasses(cls) -> List[type]:
    found = [cls]
    for sub in cls.__subclasses__():
        found += _subclasses(sub)
    return found


def measure(cfg, repeats: int) -> List[str]:
    import fairseq_plugins  # noqa: F401  (the SpecDec task and model, the safe loader)
    from nmt_specdec.decoding.options import DecodingOptions
    from nmt_specdec.evaluation import loading, metrics, pipeline
    from nmt_specdec.evaluation.config import DecoderSpec, specdec
    from nmt_specdec.evaluation.testset import make_batches

    device = pipeline.setup_runtime(cfg)
    model, task = loading.load_checkpoint(cfg, device)
    detokenize = metrics.Detokenizer(task.target_dictionary, cfg.spm_model, cfg.post_process)
    testset = pipeline.load_testset(cfg, task, detokenize)
    specs = {"ours": specdec(k=0, backend=cfg.backends[0], int8=cfg.int8),
             "ct2": DecoderSpec("ct2", decoding=DecodingOptions(int8=cfg.int8))}
    generators = {name: loading.build_generator(task, model, spec, cfg)
                  for name, spec in specs.items()}
    batches = make_batches(task, testset.sources, cfg.batch_sizes[0], device)
    inf = float("inf")
    best = {name: [inf] * len(batches) for name in generators}
    split = [dict.fromkeys(PARTS, 0.0) for _ in batches]
    for repeat in range(repeats + 1):  # the first: warm-up
        for index, batch in enumerate(batches):
            for name in ("ours", "ct2") if (index + repeat) % 2 else ("ct2", "ours"):
                spent: Dict[str, float] = collections.defaultdict(float)
                gc.collect()
                gc.disable()
                with clocked(spent):
                    start = time.perf_counter()
                    task.inference_step(generators[name], [model], batch.sample)
                    seconds = time.perf_counter() - start
                gc.enable()
                if repeat and seconds < best[name][index]:
                    best[name][index] = seconds
                    if name == "ours":
                        split[index] = {part: spent[part] for part in PARTS}
    return _table(batches, best, split)


def _table(batches, best: Dict[str, List[float]], split: List[Dict[str, float]]) -> List[str]:
    rows = collections.defaultdict(lambda: [0.0] * 5 + [0])  # 5 sums of seconds, batches
    for batch, ours, ct2, parts in zip(batches, best["ours"], best["ct2"], split):
        shape = tuple(batch.sample["net_input"]["src_tokens"].shape)
        row = rows[shape]
        for i, value in enumerate([ours, ct2, *(parts[p] for p in PARTS)]):
            row[i] += value
        row[-1] += 1
    lines = ["| rows x source | batches | ours | CTranslate2 | CT2 / ours | encoder | verify "
             "| drop rows | rest |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    total = [0.0] * 5
    for shape, row in sorted(rows.items(), key=lambda item: item[0][1]):
        total = [t + v for t, v in zip(total, row)]
        lines.append(_line(f"{shape[0]} x {shape[1]}", row[-1], row))
    lines.append(_line("**all**", sum(r[-1] for r in rows.values()), total))
    return lines


def _line(label: str, count: int, row: List[float]) -> str:
    ours, ct2, encoder, verify, drop = row[:5]
    rest = ours - encoder - verify - drop
    return (f"| {label} | {count} | {ours * 1e3:.1f} | {ct2 * 1e3:.1f} | {ct2 / ours:.2f} | "
            f"{encoder * 1e3:.1f} | {verify * 1e3:.1f} | {drop * 1e3:.1f} | {rest * 1e3:.1f} |")


def main() -> int:
    logs.setup(verbose=False)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed passes (the fastest of each batch is kept)")
    args, evaluate_args = parser.parse_known_args()
    cfg = cli.config_from_args(cli.build_parser().parse_args(evaluate_args), evaluate_args)
    from nmt_specdec.evaluation.machine import cpu_isa, cpu_model

    print(f"{cfg.checkpoint}: engine greedy [{cfg.backends[0]}{' int8' if cfg.int8 else ''}] "
          f"against CTranslate2 {'int8' if cfg.int8 else 'fp32'}, batch {cfg.batch_sizes[0]}, "
          f"fastest of {args.repeats}; {cpu_model()} ({cpu_isa()}), {cfg.threads} thread(s)")
    for line in measure(cfg, args.repeats):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
