"""ONNX Runtime (CPU) model calls: the exported graphs behind the backend interface.

Inputs and outputs are torch tensors bound in place (I/O binding): the runtime
reads the cache and the encoder keys/values where they lie and writes logits,
states and new keys/values into buffers preallocated here (grow-only), so
nothing is copied on the way in or out and a warm step allocates nothing. The
loop, acceptance and cache bookkeeping are the torch backend's; only the passes
run in the runtime.

Shapes: B rows, N new positions, L layers, H heads, T cache slots, S source,
D head dim, C model dim, V vocabulary, K draft slots.
"""

from __future__ import annotations

import weakref
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor, nn

from nmt_specdec.decoding.backends.base import Backend, Verified, VerifierCalls
from nmt_specdec.decoding.backends.onnxruntime import export, graph_files
from nmt_specdec.decoding.backends.onnxruntime.attention_inputs import AttentionInputs
from nmt_specdec.decoding.backends.onnxruntime.drafters import (
    FusedDrafter,
    OrtDrafter,
    candidate_slots,
)
from nmt_specdec.decoding.backends.onnxruntime.graph_session import (
    DISABLED_FUSIONS,
    PER_TENSOR_DISABLED_FUSIONS,
    GraphSession,
    Scratch,
)
from nmt_specdec.decoding.backends.onnxruntime.memory import Memory
from nmt_specdec.decoding.backends.onnxruntime.projection import CANDIDATES, ProjectionCheck
from nmt_specdec.decoding.backends.onnxruntime.verifier_drafter import (
    COPY_DRAFTERS,
    CopyStep,
    VerifierDrafter,
)
from nmt_specdec.decoding.cache import StaticKVCache
from nmt_specdec.decoding.decision.tree import parent_index
from nmt_specdec.decoding.passes.draft_pass import source_layers
from nmt_specdec.decoding.passes.weights_watch import WeightsWatch
from nmt_specdec.errors import UserError

CACHE_CHUNK = 16  # cache slots added at a time (see StaticKVCache's grow_by)
ROWS_FROM = 8  # batches of this many rows or more verify with the 8-bit batch graph


def require_onnxruntime():
    """The ``onnxruntime`` module, or a one-line :class:`UserError`."""
    try:
        import onnxruntime
    except ImportError:
        raise UserError("--backend onnxruntime needs the onnxruntime package, which is "
                        "not installed (pip install onnxruntime, or run `make setup`)") from None
    return onnxruntime


class _Repeat(NamedTuple):
    """A verify call's bound tensors and results, kept to run it again as it is."""

    tokens: Tensor
    start: Tensor
    offsets: Tensor  # a chain's, or a draft tree's positions
    cross: Memory
    buffers: Tuple[Tensor, Tensor]  # the cache's key and value buffers it read
    self_mask: Tensor  # (with its slot index: the same kept buffers)
    session: GraphSession
    bindings: int  # the session's binding count after the call: none since
    verified: Verified
    new_kv: Tuple[Tensor, Tensor]  # (L, B, H, N, D) views of the new keys and values


class OrtVerifier(VerifierCalls):
    """The verify graph (with 8-bit products, also the batch graph for batches of
    ``ROWS_FROM`` rows or more: see :meth:`new_cache`). Its results are views of
    preallocated buffers, valid until the next ``verify`` (the loop consumes them
    within the iteration)."""

    def __init__(self, session: GraphSession, backend: "OrtBackend",
                 rows: Optional[Callable[[], Optional[GraphSession]]] = None):
        self.session, self.backend = session, backend
        self._rows = rows  # makes the 8-bit batch graph's session (on first use)
        self._rows_session: Optional[GraphSession] = None
        # The graph each live cache's batch verifies with (chosen by new_cache).
        self._graph_of: "weakref.WeakKeyDictionary[StaticKVCache, GraphSession]" = (
            weakref.WeakKeyDictionary())
        self.embed = torch.zeros(1, backend.dim)  # dtype/device/C of the loop's buffers
        self.scratch = Scratch()
        # The 8-bit graphs take the same-bits layout (see export_graphs).
        self.attention_inputs = AttentionInputs(backend.heads, same_bits=backend.int8)
        self._chains: Dict[int, Tuple[Tensor, Tensor]] = {}
        self._past: Optional[Tuple[Tensor, Tensor, List[Tensor]]] = None
        self._repeat: Optional[_Repeat] = None  # the last plain verify call
        self._spare_cache: Optional[Tuple[Tensor, Tensor]] = None  # see new_cache
        weight = backend.model.decoder.output_projection.weight
        self.projection_check = ProjectionCheck(weight) if backend.certified else None

    def _chain(self, new: int) -> Tuple[Tensor, Tensor]:
        """Offsets 0..N-1 and the causal mask of a chain of N inputs (kept, so that
        their bindings stay put from step to step)."""
        if new not in self._chains:
            offsets = torch.arange(new)
            self._chains[new] = (offsets, offsets.view(-1, 1) >= offsets.view(1, -1))
        return self._chains[new]

    def past_views(self, cache: StaticKVCache) -> List[Tensor]:
        """Each layer's key and value buffer, (B, H, T, D): the same view objects
        while the cache keeps its buffers (rows leaving replace them)."""
        if self._past is None or self._past[0] is not cache.key or self._past[1] is not cache.value:
            views = [t[layer] for layer in range(self.backend.layers)
                     for t in (cache.key, cache.value)]
            self._past = (cache.key, cache.value, views)
        return self._past[2]

    def cross_states(self, encoder_out: Memory) -> Memory:
        return encoder_out

    def keep_rows(self, cross: Memory, rows: Tensor) -> Memory:
        return Memory(*cross[:2], []).keep_rows(rows)  # the drafter keeps its own rows

    def new_cache(self, batch: int, slots: int) -> StaticKVCache:
        b = self.backend
        # The graph attends over (and copies) the whole buffer, so it grows as the rows
        # do, at batch 1 too: faster than a buffer as wide as the length limit, with the
        # same output (docs/results.md). One sentence after another takes over the last
        # one's first buffers (the loop is done with it): they stay bound as they are.
        cache = StaticKVCache(b.layers, batch, b.heads, slots, b.dim // b.heads, like=self.embed,
                              grow_by=CACHE_CHUNK, spare=self._spare_cache if batch == 1 else None)
        if batch == 1:
            self._spare_cache = cache.first_buffers
        if batch >= ROWS_FROM:  # the whole batch, to its last row, verifies with one graph:
            # beta=1 is then its greedy (the two graphs quantize the weights differently).
            self._graph_of[cache] = self._graph_for(batch)
        return cache

    def _graph_for(self, batch: int) -> GraphSession:
        """The graph for ``batch`` rows where the cache has none (a drafting copy's calls)."""
        return (self._batch_graph() if batch >= ROWS_FROM else None) or self.session

    def _batch_graph(self) -> Optional[GraphSession]:
        """The verifier with per-row 8-bit integer products: with ``--int8`` every
        product, faster than ``MatMulNBits`` from 8 rows on, slower for one row; in
        fp32 the certified output projection alone (its decisions are fp32's either
        way), about half ``MatMulNBits``' time at 13 to 32 rows."""
        if self._rows is not None:
            self._rows_session, self._rows = self._rows(), None
        return self._rows_session

    def verify(self, tokens: Tensor, start: Tensor, start_max: int, cache: StaticKVCache,
               cross: Memory, uniform: bool = False, tree=None) -> Verified:
        self.backend.calls["verify"] += 1
        new = tokens.size(1)
        cache.reserve(start_max + new)  # before the graph reads the buffers
        offsets, ancestors = tree if tree is not None else self._chain(new)
        self_inputs = self.attention_inputs(start, uniform, cache.slots, ancestors,
                                            chain=tree is None)
        repeat = self._repeat
        if (repeat is not None and repeat.tokens is tokens and repeat.start is start
                and repeat.offsets is offsets and repeat.cross is cross
                and repeat.buffers[0] is cache.key
                and repeat.buffers[1] is cache.value and repeat.self_mask is self_inputs[0]
                and repeat.session.bindings == repeat.bindings and not self._fused_turn(new)):
            # The very tensors of the last call, bound as they are (a greedy step of
            # one sentence): run it again, without the Python around the runtime.
            repeat.session.run_bound()
            verified, (keys, values) = repeat.verified, repeat.new_kv
        else:
            verified, keys, values = self._call(tokens, start, cache, cross, offsets,
                                                self_inputs)
        # The graph read the whole cache; the shared cache code writes the new slots.
        cache.begin_pass(start, new, start_max, uniform, mask=False)
        cache.store_all(keys, values)
        return verified

    def _fused_turn(self, new: int) -> bool:
        """Whether these N inputs are the drafts the fused drafter just proposed."""
        drafter = self.backend.fused_drafter
        return drafter is not None and drafter.k > 0 and new - 1 == drafter.k * drafter.count

    def _call(self, tokens: Tensor, start: Tensor, cache: StaticKVCache, cross: Memory,
              offsets: Tensor, self_inputs: tuple) -> Tuple[Verified, Tensor, Tensor]:
        """Binds and runs the verify (or fused) graph; returns its results and the
        (L, B, H, N, D) new keys and values."""
        b = self.backend
        batch, new = tokens.shape
        take = self.scratch.take
        logits = take("logits", (batch, new, b.vocab))
        lse = take("normaliser", (batch, new))
        hidden = take("hidden", (batch, new, b.dim))
        # (L*B, H, N, D) as the graph returns them (no Unsqueeze per layer).
        keys = take("keys", (b.layers * batch, b.heads, new, b.dim // b.heads))
        values = take("values", keys.shape)
        past = self.past_views(cache)
        decision, certified, session = None, (), None
        if self._fused_turn(new):
            # These are the drafts it just proposed: the call also accepts and drafts
            # the next block, which its next proposal reads (before the next verify).
            drafter = b.fused_drafter
            depth, count = drafter.k, drafter.count
            drafts = take("drafts", (batch, count, depth), torch.long)
            decision = take("decision", (batch, 4), torch.long)
            b.fused_session.run([tokens, start, cross.mask, offsets, *self_inputs,
                                 parent_index(depth, count), candidate_slots(depth + 1),
                                 candidate_slots(count), *past, *cross.cross,
                                 *drafter.memory.draft],
                                [logits, lse, hidden, keys, values, drafts, decision])
            drafter.offer(drafts, decision, start, hidden)
        else:
            outputs = [logits, lse, hidden, keys, values]
            if b.certified:
                certified = (take("bound", (batch, new)), take("rounding", (batch, new)),
                             take("candidates", (batch, new, CANDIDATES), torch.long))
                outputs += certified
            session = self._graph_of.get(cache) or self._graph_for(batch)
            session.run([tokens, start, cross.mask, offsets, *self_inputs, *past,
                         *cross.cross], outputs)
        shape = (b.layers, batch, *keys.shape[1:])
        new_kv = (keys.view(shape), values.view(shape))
        verified = Verified(hidden, logits, lse, decision, *certified)
        self._repeat = None if session is None else _Repeat(
            tokens, start, offsets, cross, (cache.key, cache.value), self_inputs[0], session,
            session.bindings, verified, new_kv)
        return (verified, *new_kv)

    def exact_logits(self, hidden: Tensor) -> Tensor:
        """(B, N, V) fp32 logits of ``hidden`` (B, N, C), for an uncertain decision."""
        weight = self.backend.model.decoder.output_projection.weight
        return torch.matmul(hidden, weight.detach().t())


class OrtBackend(Backend):
    """The model exported to ONNX (cached), run by ONNX Runtime on the CPU.

    Args:
        model: a fairseq encoder-decoder on the CPU (a ``draft_head`` for K > 0).
        pad, eos: special ids of the target dictionary.
        int8: 8-bit weights in the verifier and draft graphs (see :mod:`.quantize`).
        fused_draft: draft inside the verify call (see :mod:`.fused`).
        threads: intra-op threads (default: ``torch.get_num_threads()``).
        int8_draft: 8-bit weights in the draft graph only, beside the fp32
            verifier (the default; ignored with ``int8``; with ``fused_draft``
            also the draft head inside the fused graph).
            Drafts are proposals: the fp32 verifier decides every token, so the
            output is unchanged, the draft call cheaper and its acceptance
            the same (docs/results.md).
        certified: the fp32 verifier's output projection in 8 bits, its
            decisions certified in fp32 (the default; see :mod:`.projection`):
            the same tokens, a cheaper verify call at batch 1, positional scores
            within ~3e-3. Off: every logit in fp32.
        refine_steps: the draft head's refinement runs, unrolled into the draft
            graph (None: the head's own setting).
        copy_bits: with ``int8``, the drafting copy's, whose step graph has
            weights of these bits (8 or 4; 0: not a copy).
    """

    name = "onnxruntime"
    runtime_calls = ((GraphSession, "run_bound"),)  # run() binds, then calls it

    def __init__(self, model: nn.Module, pad: int, eos: int, int8: bool = False,
                 threads: Optional[int] = None, fused_draft: bool = False,
                 int8_draft: bool = True, certified: bool = True,
                 refine_steps: Optional[int] = None, copy_bits: int = 0):
        super().__init__()
        self._ort = require_onnxruntime()
        if any(p.device.type != "cpu" for p in model.parameters()):
            raise UserError("--backend onnxruntime runs on the CPU: pass --cpu "
                            "(or use --backend torch on the GPU)")
        # Weakly: backends are shared per model in a WeakKeyDictionary, whose
        # entries would never go if their value held the key.
        self._model = weakref.ref(model)
        self.pad, self.eos, self.int8 = pad, eos, int8
        self.refine_steps, self.copy_bits = refine_steps, copy_bits
        self.fused_draft = fused_draft
        # The fused graph's draft head is quantized as the draft graph's (see export).
        self.int8_draft = int8_draft and not int8
        # A vocabulary that the candidates nearly cover has nothing to save.
        self.certified = (certified and not int8 and
                          model.decoder.output_projection.out_features > 4 * CANDIDATES)
        self.fused_drafter = None  # the generator drafting from fused calls, this batch
        self._copies: Dict[int, tuple] = {}  # --spec-drafter verifier-int<bits>: (backend, calls)
        self.threads = threads or torch.get_num_threads()
        decoder = model.decoder
        self.layers = len(decoder.layers)
        self.heads = decoder.layers[0].self_attn.num_heads
        self.dim = decoder.embed_tokens.embedding_dim
        self.vocab = decoder.output_projection.out_features
        self._load()
        self._watch = WeightsWatch(model)

    def _load(self) -> None:
        directory = export.graph_dir(self.model, self.pad, self.eos, self.int8,
                                     fused=self.fused_draft, int8_draft=self.int8_draft,
                                     certified=self.certified, refine_steps=self.refine_steps,
                                     copy_bits=self.copy_bits)
        self.directory = directory
        head = getattr(self.model, "draft_head", None)
        draft_layers = source_layers(head, self.refine_steps) if head is not None else 0

        def session(name: str, disabled=DISABLED_FUSIONS) -> Optional[GraphSession]:
            if not (directory / name).exists():
                return None
            inputs = graph_files.input_names(name, self.layers, draft_layers)
            return GraphSession(self._ort, directory / name, self.threads, inputs, disabled)

        self.encoder_session = session(graph_files.ENCODER)
        # A batch of one sentence (graph_files.ENCODER_SENTENCE).
        self.sentence_encoder_session = session(graph_files.ENCODER_SENTENCE,
                                                PER_TENSOR_DISABLED_FUSIONS)
        self._verifier = OrtVerifier(session(graph_files.VERIFY), self,
                                     rows=lambda: session(graph_files.VERIFY_ROWS))
        self.draft_session = session(graph_files.DRAFT)
        self.draft_logits_session = session(graph_files.DRAFT_LOGITS)
        self.draft_memory_session = session(graph_files.DRAFT_MEMORY)
        self.copy_step_session = session(graph_files.COPY_STEP)
        self.fused_session = session(graph_files.FUSED) if self.fused_draft else None
        # The draft head's source layers (their keys/values: draft_memory).
        self.draft_layers = draft_layers if self.draft_session is not None else 0

    @property
    def model(self) -> nn.Module:
        model = self._model()
        assert model is not None, "the model of this backend was garbage-collected"
        return model

    def _fresh(self) -> None:
        if self._watch.changed():  # trained or replaced since the export
            self._load()

    def encode(self, net_input: dict) -> Memory:
        self._fresh()
        self.fused_drafter = None  # until this batch's drafter registers (start_batch)
        self.calls["encode"] += 1
        src = net_input["src_tokens"]
        batch, source = src.shape
        head_dim = self.dim // self.heads
        mask = torch.empty(batch, 1, 1, source, dtype=torch.bool)
        kv = [torch.empty(batch, self.heads, source, head_dim) for _ in range(2 * self.layers)]
        states = torch.empty(batch, source, self.dim) if self.draft_layers else None
        encoder = (self.sentence_encoder_session if batch == 1 else None) or self.encoder_session
        encoder.run([src, net_input["src_lengths"]],
                    [mask, *kv] + ([states] if states is not None else []))
        return Memory(mask, kv, [], states)

    def draft_memory(self, memory: Memory) -> Memory:
        """``memory`` with the draft head's keys/values (a batch that drafts)."""
        assert memory.states is not None, "encoded without a draft head"
        self.calls["draft_memory"] += 1
        batch, source, _ = memory.states.shape
        draft = [torch.empty(batch, self.heads, source, self.dim // self.heads)
                 for _ in range(2 * self.draft_layers)]
        self.draft_memory_session.run([memory.states], draft)
        return memory._replace(draft=draft)

    def verifier(self) -> OrtVerifier:
        # Freshness is checked once per batch, in encode (it walks every parameter).
        return self._verifier

    def _copy_drafter(self, pad: int, bits: int) -> VerifierDrafter:
        """The ``bits``-bit copy of this verifier (fp32 or ``--int8``) drafting for it
        (sessions of its own)."""
        if bits not in self._copies:
            copy = OrtBackend(self.model, self.pad, self.eos, int8=True, threads=self.threads,
                              copy_bits=bits)
            self._copies[bits] = (copy, CopyStep(copy, ROWS_FROM))
        copy, step = self._copies[bits]

        def steps() -> CopyStep:
            copy._fresh()  # re-exported with this backend when the weights change
            return step

        return VerifierDrafter(steps, pad, self.vocab)

    def drafter(self, pad: int, kind: str = "head"):
        if kind in COPY_DRAFTERS:
            return self._copy_drafter(pad, COPY_DRAFTERS[kind])
        if self.draft_session is None:
            raise UserError("--spec-k > 0 needs a model with a draft head")
        start = self.model.draft_head.start_state.detach().clone()
        if self.fused_session is not None:
            return FusedDrafter(start, self)
        return OrtDrafter(start, self)
