"""``specdec_joint_loss``: AR label-smoothed CE + lambda * draft CE.

The encoder runs once; its output feeds both the verifier (teacher forcing on
the gold or distilled target) and the draft head. The head's blocks are
``--draft-cuts`` random cuts per sentence of the draft target (distilled when
given), each reading the verifier's teacher-forced state at the cut
(:mod:`nmt_specdec.model.draft_examples`); the verifier's states, the encoder output and
the shared embeddings are detached, so the draft loss never changes the
verifier or the encoder, also when both are trained jointly. The two losses are
logged separately, with the draft head's accuracy over all slots and on slot 1
(and, with a refinement pass, its teacher-forced accuracy ``refine_acc``).
With ``--draft-soft-weight`` α each slot's target is (1 - α) its token plus α
the verifier's own distribution there (soft labels, as DistillSpec distils its
drafters), read off the same states through the verifier's output projection.

With ``--cached-states`` (a frozen verifier) a batch carries the verifier's
encoder output and decoder states, computed once before training: the verifier
does not run and only the draft loss is computed (``ar_loss`` logs 0).
"""


import contextlib
import math
from dataclasses import dataclass, field

import torch

from fairseq import metrics, utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

from nmt_specdec.model.chunked_loss import summed_nll
from nmt_specdec.model.draft_examples import make_draft_cuts
from nmt_specdec.errors import UserError

# Validation cuts come from a fixed seed so that draft accuracy is comparable
# between checkpoints; training cuts follow fairseq's per-update seeding.
_VALID_SEED = 1234


@dataclass
class SpecDecJointLossConfig(LabelSmoothedCrossEntropyCriterionConfig):
    draft_loss_weight: float = field(
        default=1.0, metadata={"help": "lambda: weight of the draft-head CE in the joint loss"}
    )
    draft_cuts: int = field(
        default=4, metadata={"help": "draft-head training blocks (random cut points) per "
                                     "sentence"}
    )
    draft_soft_weight: float = field(
        default=0.0, metadata={"help": "weight of the verifier's own distribution in the draft "
                                       "head's targets (0: its tokens alone; 1: its "
                                       "distribution alone)"}
    )


@register_criterion("specdec_joint_loss", dataclass=SpecDecJointLossConfig)
class SpecDecJointLoss(LabelSmoothedCrossEntropyCriterion):
    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0,
                 report_accuracy=False, draft_loss_weight=1.0, draft_cuts=4,
                 draft_soft_weight=0.0):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if draft_loss_weight < 0:
            raise UserError(f"--draft-loss-weight must be >= 0, got {draft_loss_weight}")
        if draft_cuts < 1:
            raise UserError(f"--draft-cuts must be >= 1, got {draft_cuts}")
        if not 0 <= draft_soft_weight <= 1:
            raise UserError(f"--draft-soft-weight must be in [0, 1], got {draft_soft_weight}")
        self.draft_loss_weight = draft_loss_weight
        self.draft_cuts = draft_cuts
        self.draft_soft_weight = draft_soft_weight
        self.bos = task.target_dictionary.eos()  # fairseq starts decoding with EOS

    def forward(self, model, sample, reduce=True):
        if not hasattr(model, "draft_head"):
            raise UserError("--criterion specdec_joint_loss needs --arch specdec_transformer*")
        if "cached_states" in sample:
            return self._forward_cached(model, sample)
        net_input = sample["net_input"]
        frozen = not any(p.requires_grad for p in model.encoder.parameters())
        # A frozen verifier runs as at decoding time (no dropout), so the head
        # learns from exactly the states it will read.
        with torch.set_grad_enabled(torch.is_grad_enabled() and not frozen), \
                _eval_mode(model.encoder, model.decoder, when=frozen):
            encoder_out = model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"])
            features, extra = model.decoder(net_input["prev_output_tokens"],
                                            encoder_out=encoder_out, features_only=True)
            net_output = (model.decoder.output_layer(features), extra)
            ar_loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        draft = self._draft_loss(model, sample, encoder_out, features.detach())
        draft_term, sample_size = self._weighted_draft_loss(draft, sample)
        loss = ar_loss + draft_term
        logging_output = _logged(loss, ar_loss, nll_loss, draft, sample, sample_size)
        if self.report_accuracy:
            n_correct, total = self.compute_accuracy(model, net_output, sample)
            logging_output["n_correct"] = utils.item(n_correct.data)
            logging_output["total"] = utils.item(total.data)
        return loss, sample_size, logging_output

    def _forward_cached(self, model, sample):
        """The draft loss alone, from the frozen verifier's cached outputs
        (``--cached-states``): the verifier does not run, its loss is not computed."""
        if any(p.requires_grad for p in model.encoder.parameters()):
            raise UserError("--cached-states needs --freeze-verifier (the cache is of a "
                            "frozen verifier)")
        dtype = model.draft_head.start_state.dtype
        encoder_out = {"encoder_out": [sample["cached_encoder"].to(dtype)],
                       "encoder_padding_mask": [sample["cached_padding"]]}
        draft = self._draft_loss(model, sample, encoder_out, sample["cached_states"].to(dtype))
        loss, sample_size = self._weighted_draft_loss(draft, sample)
        zero = loss.new_zeros(())
        return loss, sample_size, _logged(loss, zero, zero, draft, sample, sample_size)

    def _weighted_draft_loss(self, draft, sample):
        """(lambda * the draft CE at the AR loss's scale, the batch's sample size).

        The draft CE is a per-token mean rescaled to the AR loss's sum scale, so
        lambda means the same whatever the batch's draft/AR token ratio."""
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        scale = sample_size / max(draft["tokens"], 1)
        return self.draft_loss_weight * draft["loss"] * scale, sample_size

    def _draft_loss(self, model, sample, encoder_out, gold_states):
        target = sample.get("draft_target")
        if target is None:
            target, states = sample["target"], gold_states
        else:  # the verifier's states on the distilled target it would have produced
            states = self._verifier_states(model, target, encoder_out)
        generator = None if model.training else torch.Generator().manual_seed(_VALID_SEED)
        head = model.draft_head
        cuts = make_draft_cuts(target, states, model.draft_block_size, self.draft_cuts,
                               bos=self.bos, pad=self.padding_idx, generator=generator)
        inputs = torch.where(cuts.has_state.unsqueeze(1), cuts.states,
                             head.start_state.to(cuts.states.dtype).expand_as(cuts.states))
        # Detached: the draft loss trains the head alone, never the shared encoder.
        memory = {"encoder_out": [encoder_out["encoder_out"][0].detach()],
                  "encoder_padding_mask": encoder_out["encoder_padding_mask"]}
        # The refinement pass (if any) is teacher-forced: slot j reads the true
        # token before it, the only case in which slot j can be accepted.
        first, refined = head.forward_refined(inputs, cuts.last_tokens, cuts.positions, memory,
                                              model.draft_block_size, rows=cuts.rows,
                                              slot_tokens=cuts.target)  # (N, K, V)
        valid = cuts.target.ne(self.padding_idx)  # (N, K)
        # Tokens outside a cut draft vocabulary cannot be drafted: no loss, but
        # they still count as misses in the accuracies.
        learnable = valid & cuts.target.lt(first.size(-1))
        target = cuts.target.masked_fill(~learnable, self.padding_idx).view(-1)
        teacher = self._teacher_logits(head, states, cuts) if self.draft_soft_weight else None
        out = {"tokens": int(learnable.sum()), "total1": int(valid[:, 0].sum()),
               "total": int(valid.sum())}
        for name, logits in (("", first), ("refine_", refined)):
            if logits is None:
                continue
            hits = (logits.argmax(-1) == cuts.target) & valid
            out[name + "loss"] = summed_nll(logits.reshape(-1, logits.size(-1)), target,
                                            self.padding_idx, teacher, self.draft_soft_weight)
            out[name + "correct"] = int(hits.sum())
            out[name + "correct1"] = int(hits[:, 0].sum())
        if refined is not None:
            out["loss"] = out["loss"] + out.pop("refine_loss")
        return out

    @staticmethod
    def _teacher_logits(head, states, cuts):
        """(N*K, V) the verifier's logits over the draft vocabulary at every
        slot of every block: its state at the slot's position (``states[b, i]``
        predicts target token i) through its own output projection."""
        slots = cuts.positions.unsqueeze(1) + torch.arange(cuts.target.size(1),
                                                           device=cuts.target.device)
        slot_states = states[cuts.rows.unsqueeze(1), slots.clamp(max=states.size(1) - 1)]
        with torch.no_grad():
            logits = torch.nn.functional.linear(slot_states, head.verifier_output_weight()
                                                .to(slot_states.dtype))
        return logits.reshape(-1, logits.size(-1))

    def _verifier_states(self, model, target, encoder_out):
        shifted = torch.cat([target.new_full((target.size(0), 1), self.bos), target[:, :-1]], 1)
        with torch.no_grad():
            states, _ = model.decoder(shifted, encoder_out=encoder_out, features_only=True)
        return states

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)

        def total(key):
            return utils.item(sum(log.get(key, 0) for log in logging_outputs))

        sample_size, draft_tokens = total("sample_size"), total("draft_tokens")
        metrics.log_scalar("ar_loss", total("ar_loss") / max(sample_size, 1) / math.log(2),
                           sample_size, round=3)
        metrics.log_scalar("draft_loss", total("draft_loss") / max(draft_tokens, 1) / math.log(2),
                           draft_tokens, round=3)
        metrics.log_scalar("draft_tokens", draft_tokens)
        metrics.log_scalar("draft_correct", total("draft_correct"))
        metrics.log_scalar("draft_total1", total("draft_total1"))
        metrics.log_scalar("draft_correct1", total("draft_correct1"))
        metrics.log_scalar("draft_total", total("draft_total"))
        metrics.log_derived("draft_acc", lambda m: _percent(m, "draft_correct", "draft_total"))
        metrics.log_derived("draft_acc1", lambda m: _percent(m, "draft_correct1", "draft_total1"))
        if total("refine_correct"):  # teacher-forced: slot j given the true tokens before it
            metrics.log_scalar("refine_correct", total("refine_correct"))
            metrics.log_derived("refine_acc", lambda m: _percent(m, "refine_correct", "draft_total"))


def _logged(loss, ar_loss, nll_loss, draft, sample, sample_size) -> dict:
    """A batch's logging output: the losses, the draft head's hits and the sizes."""
    return {
        "loss": loss.data,
        "ar_loss": ar_loss.data,
        "nll_loss": nll_loss.data,
        "draft_loss": draft["loss"].data,
        "draft_tokens": draft["tokens"],
        "draft_correct": draft["correct"],
        "draft_correct1": draft["correct1"],
        "draft_total": draft["total"],
        "draft_total1": draft["total1"],
        "refine_correct": draft.get("refine_correct", 0),
        "ntokens": sample["ntokens"],
        "nsentences": sample["target"].size(0),
        "sample_size": sample_size,
    }


@contextlib.contextmanager
def _eval_mode(*modules, when: bool):
    modes = [m.training for m in modules]
    if when:
        for module in modules:
            module.eval()
    try:
        yield
    finally:
        for module, mode in zip(modules, modes):
            module.train(mode)


def _percent(meters, hits: str, total: str) -> float:
    denominator = meters[total].sum
    return round(meters[hits].sum * 100.0 / denominator, 2) if denominator > 0 else float("nan")
