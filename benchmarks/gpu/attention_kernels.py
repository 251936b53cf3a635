"""Which attention kernels the engine should decode with on a GPU: a probe.

Times the engine's greedy and SpecDec K=2 beta=1 on the shipped model (the 40
hand-written test sentences of ``tests/helpers``), per precision and batch size,
once with torch's own choice of ``scaled_dot_product_attention`` kernels and once
with :data:`nmt_specdec.decoding.device.DECODING_ATTENTION` (cuDNN's left out),
and says whether both give the same tokens. One process, alternating passes: the
first pass of each (where a kernel that plans per shape pays its plans) and the
minimum of ``--repeats``. Usage, from the repository root on a CUDA machine::

    python3 benchmarks/gpu/attention_kernels.py --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.helpers

import nmt_specdec.decoding.generator as generator_module
from nmt_specdec.decoding.device import attention_kernels
from nmt_specdec.decoding.options import DecodingOptions
from tests.helpers.shipped_model import (
    decode_all,
    hand_written_sources,
    load_model,
    shipped_generator,
)


def timed(generator, model, task, sources, batch: int) -> tuple:
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    start = time.perf_counter()
    tokens = decode_all(generator, model, task, sources, batch)
    sync()
    return time.perf_counter() - start, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=40)
    parser.add_argument("--device", default="cuda", help="cpu: a rehearsal of the script")
    args = parser.parse_args()
    model, task = load_model()
    sources = hand_written_sources(task, args.sentences)
    kernels = {"torch's choice": lambda device: contextlib.nullcontext(),
               "decoding's": attention_kernels}
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else args.device
    print(f"{where}, torch {torch.__version__}, {len(sources)} sentences, "
          f"{args.repeats} passes each")
    print("| precision | batch | decoder | torch's choice s: first, min | decoding's s: first, min "
          "| ratio of mins | same tokens |")
    print("|---|---:|---|---:|---:|---:|---|")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        cuda = copy.deepcopy(model).to(device=args.device, dtype=dtype)
        for batch in (1, 32):
            for name, k in (("greedy", 0), ("K=2 β=1", 2)):
                generator = shipped_generator(cuda, task, options=DecodingOptions(k=k))
                seconds = {label: [] for label in kernels}
                outputs = {}
                decode_all(generator, cuda, task, sources[:4], batch)  # CUDA and cuBLAS warm
                for repeat in range(args.repeats):
                    order = list(kernels.items())
                    for label, choose in order if repeat % 2 == 0 else order[::-1]:
                        generator_module.attention_kernels = choose
                        took, outputs[label] = timed(generator, cuda, task, sources, batch)
                        seconds[label].append(took)
                generator_module.attention_kernels = attention_kernels
                a, b = seconds.values()
                same = outputs["torch's choice"] == outputs["decoding's"]
                print(f"| {str(dtype)[6:]} | {batch} | {name} | {a[0]:.3f}, {min(a):.3f} | "
                      f"{b[0]:.3f}, {min(b):.3f} | {min(a) / min(b):.2f}x | {same} |", flush=True)


if __name__ == "__main__":
    main()
