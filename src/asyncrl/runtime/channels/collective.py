"""The ``collective`` weight channel: weights from the trainer to each rollout worker over a
``torch.distributed`` process group of their own (gloo on the CPU, NCCL between GPUs), so workers on
other nodes get them at the interconnect's speed rather than through a store.

The trainer opens a TCPStore server listening on ``ASYNCRL_CHANNEL_ADDR`` only (default 127.0.0.1;
on several nodes, an address of the trainer's node that the workers reach) and publishes the version number
in it. A worker joins on its first pull: it takes the next peer number from the store, writes who it
is (host and pid), and it and a thread of the trainer form a process group of two (trainer rank 0,
worker rank 1). Each pull is a request in the store, answered by the trainer's thread with a header
``[version, n_weights]`` and then the flat weights, broadcast from rank 0 in buckets of
``BUCKET_ELEMENTS``.

Why pairs and not one group of the trainer and every worker: a broadcast to one group needs every
member at once, so the trainer would wait at each publish for every worker to reach the end of a
decode chunk, and a dead worker would hang it. The cost is one send per worker per version it pulls,
from the trainer's link.

**Buffers.** The trainer keeps preallocated flat buffers and counts, under a lock, the threads
sending each one (on a GPU a sender holds its buffer until the GPU has sent it). A publish writes the
published buffer in place when no thread is sending it, withdrawing it meanwhile: a pull that asks
during the copy waits for it and gets the new version. When a thread is still sending it, the
publish writes another buffer (the spare, or a new one only if every buffer is held) and then
publishes that. So a pull never sees two versions mixed (nothing writes a buffer that is being sent
or published), and a publish never waits for a worker, slow, stopped or dead. Memory: one flat copy
of the weights in steady state, two once a send has overlapped a publish (one spare is kept; a
third, held by a slow sender, goes once it is let go); allocated only when every buffer is held.

**Faults.** Every collective of a pair, on every backend, fails after ``PAIR_TIMEOUT``. A worker
that dies mid-pull ends its pair's sends with an error (its sockets close); one that only stops,
after the timeout; either way only that thread ends. The trainer's NCCL pairs are built with
PyTorch's async error handling set to clean up only (``PAIR_NCCL_ENV``): a failed or timed-out
collective aborts that pair's communicators and raises in its thread, where PyTorch's default would
end the whole trainer process. ProcessGroupNCCL reads that setting from the environment, which is
the process's: the trainer sets it once, when the channel opens and before its threads start, never
from a pair's thread (asyncrl.distributed.nccl_env; the trainer ranks' own group has it too). The
pool reports each worker it finds dead (:meth:`CollectiveWeights.worker_lost`): its thread stops,
and on NCCL its pair is aborted at once rather than at the timeout. NCCL sends run on a CUDA stream
of their own, so a stuck pair never holds up the trainer's own GPU work.

NCCL refuses two ranks on one GPU: config refuses this channel where the workers run on the trainer's
GPU (:class:`asyncrl.core.registries.ChannelEntry`, ``own_gpu``).
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import socket
import threading
from dataclasses import dataclass

import torch

from asyncrl.policy.lora import export_state_dict
from asyncrl.core.addresses import is_loopback
from asyncrl.distributed.nccl_env import FAULT_ENV, set_fault_env
from asyncrl.runtime.channels.flat import fill_tied, flat_views, tied_names, weight_layout

ADDR_ENV = "ASYNCRL_CHANNEL_ADDR"
BUCKET_ELEMENTS = 1 << 24  # 64 MiB of float32 per message
# every collective of a pair fails after this, gloo and NCCL alike (NCCL's own default is 10 min)
PAIR_TIMEOUT = datetime.timedelta(seconds=120)
# how the trainer's NCCL pairs handle a failed or timed-out collective: abort the pair's
# communicators and raise in its thread (2, clean up only), never tear the process down (PyTorch's
# default, 3); and no flight-recorder dump, which is a process-wide event
PAIR_NCCL_ENV = FAULT_ENV
_POLL_S = 0.01  # how often a trainer thread looks for its worker's next pull request


def _backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def _who() -> str:
    """How a worker names itself in the store: the pool knows its workers by host and pid."""
    return f"{socket.gethostname()}/{os.getpid()}"


def _pair(store, peer: int, rank: int, device: torch.device, host: str):
    """The process group of the trainer (rank 0) and worker ``peer`` (rank 1)."""
    prefixed = torch.distributed.PrefixStore(f"peer{peer}/", store)
    if _backend(device) == "nccl":
        options = torch.distributed.ProcessGroupNCCL.Options()
        options._timeout = PAIR_TIMEOUT
        # error handling as the environment says: the trainer's PAIR_NCCL_ENV (set when the channel
        # opened), a worker's default (nccl_env.restore_env)
        return torch.distributed.ProcessGroupNCCL(prefixed, rank, 2, options)
    options = torch.distributed.ProcessGroupGloo._Options()
    options._timeout = PAIR_TIMEOUT
    # on loopback both ends bind there; across nodes each binds its own default interface
    gloo = torch.distributed.ProcessGroupGloo
    options._devices = [gloo.create_device(hostname="127.0.0.1") if is_loopback(host) else gloo.create_default_device()]
    return torch.distributed.ProcessGroupGloo(prefixed, rank, 2, options)


def _sending_stream(device: torch.device):
    """Where a trainer thread's sends run: on a GPU, a stream of its own, so that a pair stuck
    until its timeout never holds up the trainer's work on the default stream."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return torch.cuda.stream(torch.cuda.Stream(device=device))


def _broadcast(group, flat: torch.Tensor) -> None:
    """``flat`` from rank 0 to rank 1, in buckets (each a view: no copy on the sending side)."""
    for start in range(0, flat.numel(), BUCKET_ELEMENTS):
        group.broadcast([flat[start:start + BUCKET_ELEMENTS]]).wait()


@dataclass(eq=False)
class _Buffer:
    """One preallocated flat copy of the weights on the trainer."""

    flat: torch.Tensor
    version: int = -1
    senders: int = 0  # threads sending it now (under the channel's lock)
    ready: object = None  # CUDA: an event recorded when the publish's copy into ``flat`` was queued


@dataclass(eq=False)
class _Pair:
    """A trainer thread's pair with one worker, as :meth:`CollectiveWeights.worker_lost` ends it."""

    group: object
    who: str  # the worker's host/pid
    stop: threading.Event


class CollectiveWeights:
    """The channel's handle: the trainer's object publishes; a pickled copy (a worker's) pulls."""

    def __init__(self, model: torch.nn.Module, device: str, dtype: torch.dtype, max_buffers: int | None = None):
        """``max_buffers``: flat buffers allocated at most (None: no cap; each worker's sending
        thread holds one at a time, so workers + 1 are never exceeded anyway)."""
        if max_buffers is not None and max_buffers < 2:
            raise ValueError("max_buffers: must be >= 2 (one published while one is written)")
        self.max_buffers = max_buffers
        self.layout = weight_layout(model)
        self.tied = tied_names(export_state_dict(model))  # sent once; a receiver that does not tie them gets both
        self.numel = sum(shape.numel() for _, shape in self.layout)
        self.device = torch.device(device)
        self.dtype = dtype if self.device.type == "cuda" else torch.float32
        self.host = os.environ.get(ADDR_ENV, "127.0.0.1")
        if self.device.type == "cuda":  # before the threads that build the pairs start
            set_fault_env()
        # the store listens on our own socket, bound to the channel's address: given a port, TCPStore
        # itself would listen on every interface
        self._listener = socket.create_server((self.host, 0), backlog=128)
        self.port = self._listener.getsockname()[1]
        self.store = torch.distributed.TCPStore(self.host, self.port, is_master=True, wait_for_workers=False,
                                                timeout=PAIR_TIMEOUT, master_listen_fd=self._listener.fileno())
        self.store.set("peers", "0")
        # guards the buffers' senders, which one is published, and the pairs
        self._published = threading.Condition()
        self._buffers: list[_Buffer] = []
        self._current: _Buffer | None = None  # the published buffer; None while rewritten in place
        self.allocations = 0  # flat buffers allocated so far
        self._pairs: dict[int, _Pair] = {}  # peer number → its live pair
        self._closed = threading.Event()
        self._served = 0
        self._threads = [threading.Thread(target=self._accept, daemon=True, name="weights-accept")]
        self._threads[0].start()
        # the threads must be gone before the interpreter finalizes: one still inside a store call
        # then would abort the process on its way out
        atexit.register(self.close)
        self._group = None  # a worker's pair, joined at its first pull
        self._requests = 0
        self._received = None  # a worker's receive buffer, allocated at its first pull

    def __getstate__(self) -> dict:
        """What a worker needs: the layout, where to connect, the dtype; not the trainer's state."""
        return {"layout": self.layout, "tied": self.tied, "device": str(self.device), "dtype": self.dtype,
                "host": self.host, "port": self.port}

    def __setstate__(self, state: dict) -> None:
        self.layout, self.tied, self.dtype = state["layout"], state["tied"], state["dtype"]
        self.host, self.port = state["host"], state["port"]
        self.device = torch.device(state["device"])
        self.store, self._group, self._requests, self._received = None, None, 0, None
        self._closed, self._threads = threading.Event(), []

    # --- trainer side ---

    @torch.no_grad()
    def publish(self, model: torch.nn.Module, version: int) -> None:
        buffer = self._writable()
        state = export_state_dict(model)
        views = flat_views(buffer.flat, self.layout)
        torch._foreach_copy_([view for _, view in views], [state[name].detach() for name, _ in views])
        buffer.version = version
        if self.device.type == "cuda":  # a sender's stream waits for this copy, not for the whole GPU
            buffer.ready = torch.cuda.Event()
            buffer.ready.record()
        with self._published:
            self._current = buffer
            idle = [b for b in self._buffers if b is not buffer and b.senders == 0]
            for extra in idle[1:]:  # one spare is kept for a publish that overlaps a send
                self._buffers.remove(extra)
            self._published.notify_all()
        self.store.set("version", str(version))

    def _writable(self) -> _Buffer:
        """The buffer this publish writes: the published one if no thread is sending it (withdrawn
        until the copy is done; if the copy fails, pulls wait for the next publish), else one that
        no thread holds, allocated only when every buffer is held and the cap allows; at the cap,
        the publish waits until a send lets one go. Only publish writes a buffer."""
        with self._published:
            while True:
                current, self._current = self._current, None
                if current is not None and current.senders == 0:
                    return current
                self._current = current
                for buffer in self._buffers:
                    if buffer is not current and buffer.senders == 0:
                        return buffer
                if self.max_buffers is None or len(self._buffers) < self.max_buffers:
                    break
                if self._closed.is_set():
                    raise RuntimeError("the channel closed")
                self._published.wait(0.1)  # _let_go notifies
        buffer = _Buffer(torch.empty(self.numel, dtype=self.dtype, device=self.device))
        self.allocations += 1
        with self._published:
            self._buffers.append(buffer)
        return buffer

    def _take(self, stop: threading.Event) -> _Buffer:
        """The published buffer, held for a send (waits while a publish rewrites it in place)."""
        with self._published:
            while self._current is None:
                if self._closed.is_set() or stop.is_set():
                    raise RuntimeError("the channel closed or the worker is gone")
                self._published.wait(0.1)
            self._current.senders += 1
            return self._current

    def _let_go(self, buffer: _Buffer) -> None:
        with self._published:
            buffer.senders -= 1
            self._published.notify_all()  # a publish may wait at the cap

    def worker_lost(self, pid: int, host: str | None = None) -> None:
        """The pool's word that worker process ``pid`` (on ``host``; default this machine) is dead:
        its thread stops, and an NCCL pair is aborted now, so that its kernels stop waiting for a
        peer that will never come (gloo's sends already failed when the worker's sockets closed)."""
        who = f"{host or socket.gethostname()}/{pid}"
        with self._published:
            lost = [self._pairs.pop(peer) for peer, pair in list(self._pairs.items()) if pair.who == who]
        for pair in lost:
            pair.stop.set()
            if _backend(self.device) == "nccl":
                pair.group.abort()

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
            pair = _Pair(group, store.get(f"peer{peer}/who").decode(), threading.Event())
            with self._published:
                self._pairs[peer] = pair
            with _sending_stream(self.device):
                self._answer(store, peer, pair)
        except Exception:  # noqa: BLE001 (the worker died or stopped: only this pair ends)
            return
        finally:
            with self._published:
                self._pairs.pop(peer, None)

    def _answer(self, store, peer: int, pair: _Pair) -> None:
        request = 0
        while not (self._closed.is_set() or pair.stop.is_set()):
            key = f"peer{peer}/pull{request}"
            if not store.check([key]):
                self._closed.wait(_POLL_S)
                continue
            store.delete_key(key)
            buffer = self._take(pair.stop)
            try:
                self._send(pair.group, buffer)
            finally:
                self._let_go(buffer)
            request += 1

    def _send(self, group, buffer: _Buffer) -> None:
        if buffer.ready is not None:
            torch.cuda.current_stream(self.device).wait_event(buffer.ready)
        header = torch.tensor([buffer.version, buffer.flat.numel()], dtype=torch.int64, device=self.device)
        group.broadcast([header]).wait()
        _broadcast(group, buffer.flat)
        if self.device.type == "cuda":  # the buffer is being read until the GPU has sent it
            torch.cuda.current_stream(self.device).synchronize()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the trainer's threads (at exit; a thread still sending is given ``timeout_s``); on a
        worker, leave the pair (see :meth:`_leave`)."""
        self._closed.set()
        for thread in list(self._threads):
            thread.join(timeout_s)
        self._leave()

    def _leave(self) -> None:
        """Drop this worker's end of its pair and its store connection, while the interpreter is
        still whole: the pair's destructor joins gloo's threads, and one of them may still be letting
        go of the last pull's tensors, which takes the GIL. Left to the interpreter's finalization,
        that thread would be ended mid-C++ and abort the worker ("terminate called without an
        active exception")."""
        if self._group is not None:  # only a worker that joined has a pair (the trainer's are its threads')
            self._group, self.store = None, None

    # --- both sides ---

    def latest(self) -> int:
        return int(self._client().get("version"))

    # --- worker side ---

    def _client(self):
        if self.store is None:
            self.store = self._connect()
        return self.store

    def _join(self) -> tuple[int, object]:
        """This worker's peer number and its end of the pair (named in the store by host and pid)."""
        store = self._client()
        peer = store.add("peers", 1) - 1
        store.set(f"peer{peer}/who", _who())
        group = _pair(store, peer, 1, self.device, self.host)
        atexit.register(self.close)  # leave the pair before the interpreter finalizes
        return peer, group

    @torch.no_grad()
    def pull(self, model: torch.nn.Module) -> int:
        """Copy the newest published weights into ``model``; returns their version."""
        store = self._client()
        if self._group is None:
            self._group = self._join()
        peer, group = self._group
        store.set(f"peer{peer}/pull{self._requests}", "1")
        self._requests += 1
        header = torch.zeros(2, dtype=torch.int64, device=self.device)
        group.broadcast([header]).wait()
        version, numel = (int(v) for v in header.tolist())
        if self._received is None or self._received.numel() != numel:
            self._received = torch.empty(numel, dtype=self.dtype, device=self.device)
        _broadcast(group, self._received)
        state = model.state_dict()
        views = flat_views(self._received, self.layout)
        torch._foreach_copy_([state[name] for name, _ in views], [view for _, view in views])
        fill_tied(state, self.tied)
        return version


def open_collective(model: torch.nn.Module, *, device, dtype, max_buffers: int | None = None,
                    **_) -> CollectiveWeights:
    """The ``collective`` entry of :data:`asyncrl.core.registries.CHANNELS`."""
    return CollectiveWeights(model, device=device, dtype=dtype, max_buffers=max_buffers)
