"""Whether a loss and its proximal policy give the minibatch's update when a minibatch is split:
into micro-batches (``trainer.micro_batch_size``) or across the ranks of a torchrun world. Asked by
the run's config validation (asyncrl.runtime.validate), the trainer (asyncrl.training.trainer) and
``asyncrl plan``; each entry of the registries declares what it needs, no loss is named here."""

from __future__ import annotations

from typing import Any

from asyncrl.objectives.prox import prox_strategy
from asyncrl.objectives.registry import LOSSES, micro_batch_exact_losses


def check_micro_batching(loss: Any, trainer: Any, ranks: int = 1) -> None:
    """ValueError("trainer.micro_batch_size: ...") when micro-batches would not give the minibatch's
    update for this loss: a loss with a whole-minibatch statistic, or denominators that count only the
    tokens kept after filtering (known only once every micro-batch is computed). ``ranks`` > 1 (a
    torchrun world: each rank trains a share of every minibatch, as a micro-batch) makes the same
    checks, naming the world size, and refuses what a rank cannot compute from its share."""
    if trainer.micro_batch_size == 0 and ranks == 1:
        return
    what = "trainer.micro_batch_size" if ranks == 1 else f"torchrun with {ranks} trainer ranks"
    if not LOSSES[loss.name].micro_batch_exact:  # the loss's entry declares it (LossEntry.micro_batch_exact)
        raise ValueError(f"{what}: loss {loss.name!r} is not split exactly into micro-batches "
                         f"(a statistic over the whole minibatch); use {'0 or ' if ranks == 1 else ''}one of "
                         f"{', '.join(micro_batch_exact_losses())}")
    if loss.params.get("keep_filtered_in_denominator", True) is False:
        raise ValueError(f"{what}: needs loss.params.keep_filtered_in_denominator=true (a "
                         "denominator of kept tokens is known only after the whole minibatch); use 0")
    if getattr(prox_strategy(trainer.prox), "minibatch_statistic", False):
        raise ValueError(f"{what}: trainer.prox={trainer.prox!r} sets π_prox from a statistic of the whole "
                         "minibatch, which a part of it does not have")
    if ranks > 1 and trainer.vcpo.opob:
        raise ValueError(f"{what}: trainer.vcpo.opob (a per-sequence gradient norm) runs in one process only")
