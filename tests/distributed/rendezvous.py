"""How the ranks of a multi-process test meet without a port race.

Picking a free port in the test and handing it to the ranks leaves a window in which another
process (another test, under load) can take it. Here the ranks meet in a file instead (torch's
FileStore, a fresh name in the test's tmp dir), so no port is chosen before it is bound; gloo then
opens its own connections on ports the OS picks, on the loopback interface. A rank started by
torchrun (the GPU tests) has no such file and uses torchrun's ``env://``.

Teardown waits for every rank (a barrier) before the group is destroyed: a rank that tore down
while its peer still held a connection made gloo abort the peer ("terminate called without an
active exception") on a loaded machine.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from pathlib import Path

import torch

ENV = "ASYNCRL_TEST_RENDEZVOUS"
# a rank that died leaves the others waiting: they give up well before the test's own timeout
TIMEOUT = timedelta(seconds=120)


def rendezvous_env(tmp_path: Path) -> dict[str, str]:
    """Environment for the ranks of one group: a rendezvous file no other group uses."""
    return {ENV: f"file://{tmp_path / f'rendezvous-{uuid.uuid4().hex}'}", "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": "1"}


def init_group(backend: str, rank: int, world_size: int) -> None:
    torch.distributed.init_process_group(backend, init_method=os.environ.get(ENV, "env://"), rank=rank,
                                         world_size=world_size, timeout=TIMEOUT)


def close_group() -> None:
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
