"""The ``collective`` weight channel: weights from the trainer to each rollout worker over a
``torch.distributed`` process group of their own (gloo on the CPU, NCCL between GPUs), so workers on
other nodes get them at the interconnect's speed rather than through a store.

The trainer opens a TCPStore server listening on ``ASYNCRL_CHANNEL_ADDR`` only (default 127.0.0.1;
on several nodes, an address of the trainer's node that the workers reach) and publishes the version number
in it. A worker joins on its first pull: it takes the next peer number from the store, and it and a
thread of the trainer form a process group of two (trainer rank 0, worker rank 1). Each pull is a
request in the store, answered by the trainer's thread with a header ``[version, n_weights]`` and
then the flat weights, broadcast from rank 0 in buckets of ``BUCKET_ELEMENTS``.

Why pairs and not one group of the trainer and every worker: a broadcast to one group needs every
member at once, so the trainer would wait at each publish for every worker to reach the end of a
decode chunk, and a dead worker would hang it. Here a publish only replaces the trainer's
reference to the flat weights (a new tensor each time): a thread still sending the previous
version keeps that tensor alive until it is done, so no worker, slow, stopped or dead, can block a
publish. The cost is one send per worker per version it pulls, from the trainer's link.

A worker that dies mid-pull ends its pair's sends with an error (its socket closes) or, if it only
stops, after the pair's timeout (``PAIR_TIMEOUT``); either way only that thread ends.
"""

from __future__ import annotations

import atexit
import datetime
import os
import socket
import threading

import torch

from asyncrl.policy.lora import export_state_dict
from asyncrl.runtime.addresses import is_loopback
from asyncrl.runtime.channels.flat import flat_views, weight_layout

ADDR_ENV = "ASYNCRL_CHANNEL_ADDR"
BUCKET_ELEMENTS = 1 << 24  # 64 MiB of float32 per message
PAIR_TIMEOUT = datetime.timedelta(seconds=120)
_POLL_S = 0.01  # how often a trainer thread looks for its worker's next pull request


def _backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def _pair(store, peer: int, rank: int, device: torch.device, host: str):
    """The process group of the trainer (rank 0) and worker ``peer`` (rank 1)."""
    prefixed = torch.distributed.PrefixStore(f"peer{peer}/", store)
    if _backend(device) == "nccl":
        return torch.distributed.ProcessGroupNCCL(prefixed, rank, 2)
    options = torch.distributed.ProcessGroupGloo._Options()
    options._timeout = PAIR_TIMEOUT
    # on loopback both ends bind there; across nodes each binds its own default interface
    gloo = torch.distributed.ProcessGroupGloo
    options._devices = [gloo.create_device(hostname="127.0.0.1") if is_loopback(host) else gloo.create_default_device()]
    return torch.distributed.ProcessGroupGloo(prefixed, rank, 2, options)


def _broadcast(group, flat: torch.Tensor) -> None:
    """``flat`` from rank 0 to rank 1, in buckets (each a view: no copy on the sending side)."""
    for start in range(0, flat.numel(), BUCKET_ELEMENTS):
        group.broadcast([flat[start:start + BUCKET_ELEMENTS]]).wait()


class CollectiveWeights:
    """The channel's handle: the trainer's object publishes; a pickled copy (a worker's) pulls."""

    def __init__(self, model: torch.nn.Module, device: str, dtype: torch.dtype):
        self.layout = weight_layout(model)
        self.device = torch.device(device)
        self.dtype = dtype if self.device.type == "cuda" else torch.float32
        self.host = os.environ.get(ADDR_ENV, "127.0.0.1")
        # the store listens on our own socket, bound to the channel's address: given a port, TCPStore
        # itself would listen on every interface
        self._listener = socket.create_server((self.host, 0), backlog=128)
        self.port = self._listener.getsockname()[1]
        self.store = torch.distributed.TCPStore(self.host, self.port, is_master=True, wait_for_workers=False,
                                                timeout=PAIR_TIMEOUT, master_listen_fd=self._listener.fileno())
        self.store.set("peers", "0")
        self._current: tuple[int, torch.Tensor] | None = None  # (version, flat weights): trainer only
        self._closed = threading.Event()
        self._served = 0
        self._threads = [threading.Thread(target=self._accept, daemon=True, name="weights-accept")]
        self._threads[0].start()
        # the threads must be gone before the interpreter finalizes: one still inside a store call
        # then would abort the process on its way out
        atexit.register(self.close)
        self._group = None  # a worker's pair, joined at its first pull
        self._requests = 0

    def __getstate__(self) -> dict:
        """What a worker needs: the layout, where to connect, the dtype; not the trainer's state."""
        return {"layout": self.layout, "device": str(self.device), "dtype": self.dtype, "host": self.host,
                "port": self.port}

    def __setstate__(self, state: dict) -> None:
        self.layout, self.dtype, self.host, self.port = state["layout"], state["dtype"], state["host"], state["port"]
        self.device = torch.device(state["device"])
        self.store, self._group, self._requests, self._current = None, None, 0, None

    # --- trainer side ---

    @torch.no_grad()
    def publish(self, model: torch.nn.Module, version: int) -> None:
        state = export_state_dict(model)
        flat = torch.cat([state[name].detach().reshape(-1).to(self.device, self.dtype) for name, _ in self.layout])
        self._current = (version, flat)  # a thread still sending the previous one keeps it alive
        self.store.set("version", str(version))

    def _connect(self):
        """A client of the channel's store (one per thread: a store connection is not shared)."""
        return torch.distributed.TCPStore(self.host, self.port, is_master=False, timeout=PAIR_TIMEOUT)

    def _accept(self) -> None:
        """Start a thread for each worker that joins (the store's ``peers`` counter)."""
        store = self._connect()
        while not self._closed.is_set():
            joined = store.add("peers", 0)
            for peer in range(self._served, joined):
                thread = threading.Thread(target=self._serve, args=(peer,), daemon=True, name=f"weights-{peer}")
                thread.start()
                self._threads.append(thread)
            self._served = joined
            self._closed.wait(0.05)

    def _serve(self, peer: int) -> None:
        """Answer worker ``peer``'s pulls until the channel closes or the worker is gone."""
        try:
            store = self._connect()
            group = _pair(store, peer, 0, self.device, self.host)
            request = 0
            while not self._closed.is_set():
                key = f"peer{peer}/pull{request}"
                if not store.check([key]):
                    self._closed.wait(_POLL_S)
                    continue
                store.delete_key(key)
                version, flat = self._current
                header = torch.tensor([version, flat.numel()], dtype=torch.int64, device=self.device)
                group.broadcast([header]).wait()
                _broadcast(group, flat)
                request += 1
        except Exception:  # noqa: BLE001 (the worker died or stopped: only this pair ends)
            return

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the trainer's threads (at exit; a thread still sending is given ``timeout_s``)."""
        self._closed.set()
        for thread in list(self._threads):
            thread.join(timeout_s)

    # --- both sides ---

    def latest(self) -> int:
        return int(self._client().get("version"))

    # --- worker side ---

    def _client(self):
        if self.store is None:
            self.store = self._connect()
        return self.store

    @torch.no_grad()
    def pull(self, model: torch.nn.Module) -> int:
        """Copy the newest published weights into ``model``; returns their version."""
        store = self._client()
        if self._group is None:
            peer = store.add("peers", 1) - 1
            self._group = (peer, _pair(store, peer, 1, self.device, self.host))
        peer, group = self._group
        store.set(f"peer{peer}/pull{self._requests}", "1")
        self._requests += 1
        header = torch.zeros(2, dtype=torch.int64, device=self.device)
        group.broadcast([header]).wait()
        version, numel = (int(v) for v in header.tolist())
        flat = torch.empty(numel, dtype=self.dtype, device=self.device)
        _broadcast(group, flat)
        state = model.state_dict()
        views = flat_views(flat, self.layout)
        torch._foreach_copy_([state[name] for name, _ in views], [view for _, view in views])
        return version


def open_collective(model: torch.nn.Module, *, device, dtype, **_) -> CollectiveWeights:
    """The ``collective`` entry of :data:`asyncrl.core.registries.CHANNELS`."""
    return CollectiveWeights(model, device=device, dtype=dtype)
