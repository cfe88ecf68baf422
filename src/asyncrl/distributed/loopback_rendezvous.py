"""torchrun's rendezvous for ``asyncrl train --nproc-per-node N``: one agent, on this machine, and
one store, listening on 127.0.0.1 only.

torchrun's ``c10d`` rendezvous makes two TCPStores in the agent, the rendezvous's and the one the
ranks share (``MASTER_ADDR``, ``MASTER_PORT``), and ``static`` makes one; a TCPStore given a host
and port listens on every interface whatever the host, and none authenticates its clients. This
rendezvous makes a single store, on a socket it binds to 127.0.0.1 itself (TCPStore's
``master_listen_fd``), that the agent and its ranks share.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import (RendezvousHandler, RendezvousInfo, RendezvousStoreInfo,
                                                  rendezvous_handler_registry)

BACKEND = "asyncrl-loopback"  # torchrun's --rdzv-backend for it
LOOPBACK = "127.0.0.1"
JOIN_TIMEOUT_S = 600  # how long a store call waits (torchrun's rendezvous join timeout)


class LoopbackRendezvous(RendezvousHandler):
    """The rendezvous of a lone agent: rank 0 of a world of one node, its store on 127.0.0.1."""

    def __init__(self, run_id: str, timeout_s: float = JOIN_TIMEOUT_S):
        self._run_id = run_id
        listener = socket.create_server((LOOPBACK, 0), backlog=128)
        self.port = listener.getsockname()[1]
        # detached: the store owns the socket from here, and closes it
        self._store = dist.TCPStore(LOOPBACK, self.port, is_master=True, wait_for_workers=False,
                                    timeout=timedelta(seconds=timeout_s), master_listen_fd=listener.detach())
        self._closed = False

    @property
    def use_agent_store(self) -> bool:
        return True  # the ranks are clients of this store (MASTER_ADDR, MASTER_PORT): they host none

    def get_backend(self) -> str:
        return BACKEND

    def next_rendezvous(self) -> RendezvousInfo:
        # the agent's own keys under the run id, as torchrun's static rendezvous keeps them
        return RendezvousInfo(dist.PrefixStore(self._run_id, self._store), 0, 1,
                              RendezvousStoreInfo(LOOPBACK, self.port))

    def is_closed(self) -> bool:
        return self._closed

    def set_closed(self) -> None:
        self._closed = True

    def num_nodes_waiting(self) -> int:
        return 0  # no other node ever joins

    def get_run_id(self) -> str:
        return self._run_id

    def shutdown(self) -> bool:
        self._closed = True
        return True


def _create(params) -> LoopbackRendezvous:
    return LoopbackRendezvous(params.run_id, params.get_as_int("join_timeout", JOIN_TIMEOUT_S))


def register() -> None:
    """Offer :class:`LoopbackRendezvous` to torchrun as ``--rdzv-backend asyncrl-loopback``."""
    rendezvous_handler_registry.register(BACKEND, _create)
