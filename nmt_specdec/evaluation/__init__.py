"""BLEU-versus-speedup evaluation of SpecDec against fairseq's SequenceGenerator.

Everything runs in one process on one loaded checkpoint, with the
configurations interleaved so that machine noise hits them all alike.

Modules:
    config: the evaluation settings and the grid of decoder configurations.
    testset: test sentences (binarized or raw text), references, batching.
    loading: checkpoint, generators (built as ``fairseq-generate`` builds them).
    runner: warm-up and interleaved, timed decoding passes.
    profiling: SpecDec time split into encoder / draft / verify / bookkeeping
        (and, on ONNX Runtime, the time inside the runtime's calls).
    time_split: that split per output token beside every row's timed total
        (CTranslate2's too), as a table and a figure.
    metrics: detokenization, sacreBLEU and chrF, agreement with greedy output.
    machine: CPU/GPU, library versions, peak memory.
    report: result rows, ``results.json`` and ``results.md``.
    plot: the BLEU-versus-speedup figure with its Pareto front.
    pipeline: ``run(cfg)``, which ties the steps together.
    cli: the ``nmt-specdec-evaluate`` command line.

The checkpoint's fairseq plugin (``fairseq_plugins``) must be registered by
the caller (the command line does it as ``fairseq-generate --user-dir`` does);
this package never imports it.
"""
