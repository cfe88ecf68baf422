"""What torchrun puts in a rank's environment, for the processes a rank starts that are not ranks.

A rollout worker started by rank 0 inherits the rank's environment: ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT``, ``TORCHELASTIC_USE_AGENT_STORE`` and the rest. An engine that sets
up torch.distributed of its own (vLLM's in-process executor initialises a world of one from
``env://``) would then join the job's rendezvous as a rank it is not, and wait on a store that
expects no such client. The worker forgets them before it builds anything: a local worker process
(:func:`asyncrl.runtime.worker.worker_main`) and a Ray rollout actor alike (a private Ray cluster
started by rank 0 passes rank 0's environment on to its worker processes)."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

__all__ = ["LAUNCHER_KEYS", "forget_launcher"]

# set by torchrun / torch.distributed.elastic for each rank (torch/distributed/elastic/agent/server/api.py)
LAUNCHER_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
LAUNCHER_PREFIXES = ("TORCHELASTIC_",)


def forget_launcher(environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """Remove the launcher's keys from ``environ``; the names removed."""
    gone = [key for key in list(environ) if key in LAUNCHER_KEYS or key.startswith(LAUNCHER_PREFIXES)]
    for key in gone:
        del environ[key]
    return gone
