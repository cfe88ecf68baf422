"""Which process of a ``torchrun`` job this is, and the process group the trainer ranks share.

``torchrun --nproc_per_node N [--nnodes M ...] -m asyncrl train ...`` starts N × M copies of the same
command with ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` in their environment; a plain ``asyncrl
train`` has none of them and is a world of one. Rank 0 is the leader: it owns the run directory,
the batch source, evaluation, logging and checkpoints; the other ranks only train their share of
each minibatch (asyncrl.distributed.follower).

The process group is gloo on the CPU and NCCL on CUDA, where each rank takes the GPU of its
``LOCAL_RANK``. Its timeout, ``trainer.fsdp.timeout_s``, bounds a collective that a rank does not
join; on NCCL a failed or timed-out collective raises in Python, as on gloo, rather than NCCL's
watchdog aborting the process (asyncrl.distributed.nccl_env). The long waits outside collectives
(the others wait while rank 0 evaluates or writes a checkpoint) are bounded by heartbeats instead
(asyncrl.distributed.liveness). On one machine gloo and NCCL listen on the loopback interface; a job
across machines says where they listen, in one line of rank 0 (asyncrl.distributed.listeners).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass
from datetime import timedelta

import torch

from asyncrl.core.errors import AsyncRLError
from asyncrl.core.loader import ConfigError
from asyncrl.distributed.listeners import bind_collectives, notice
from asyncrl.distributed.nccl_env import set_fault_env

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


@dataclass(frozen=True)
class World:
    """rank of size (global), local_rank on this node."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def node_ranks(world: World) -> int:
    """The ranks of this job on this machine (torchrun's ``LOCAL_WORLD_SIZE``), which share its cores."""
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(local) if local.isdigit() and int(local) > 0 else world.size


def torchrun_world(env: dict[str, str] | None = None) -> World:
    """The world ``torchrun`` describes in the environment (a world of one without it).
    ValueError naming the variable for a malformed one."""
    env = os.environ if env is None else env
    values = {}
    for key, default in (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0)):
        raw = env.get(key)
        try:
            values[key] = default if raw is None else int(raw)
        except ValueError:
            raise ValueError(f"{key}={raw!r}: not an integer (set by torchrun)") from None
    world = World(values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"])
    if world.size < 1 or not 0 <= world.rank < world.size:
        raise ValueError(f"RANK={world.rank}, WORLD_SIZE={world.size}: need 0 <= RANK < WORLD_SIZE")
    return world


def init_world(world: World, device: str, timeout_s: float) -> None:
    """Join the trainer ranks' process group (no-op for a world of one). ``device``: the policy's
    device setting; on CUDA each rank uses GPU ``LOCAL_RANK``. ``timeout_s``: a collective's bound."""
    if not world.distributed or torch.distributed.is_initialized():
        return
    die_with_agent()
    cuda = torch.device(device).type == "cuda"
    if cuda:
        if world.local_rank >= torch.cuda.device_count():
            err = ConfigError("policy.device", f"cuda: rank {world.rank} has LOCAL_RANK {world.local_rank} but this "
                                               f"node has {torch.cuda.device_count()} GPU(s); use --nproc_per_node "
                                               "<= the number of GPUs")
            err.every_rank = False
            raise err
        torch.cuda.set_device(world.local_rank)
    bind_collectives()
    if world.leader and (line := notice()):
        print(line, file=sys.stderr, flush=True)
    if cuda:  # read when the group is built. Blocking waits stay off: they would stall FSDP's prefetch
        set_fault_env()
    torch.distributed.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout_s))


def die_with_agent() -> None:
    """End this rank when torchrun's agent (its parent) ends, even by SIGKILL: the agent starts each
    rank in a session of its own, so nothing else would reach it, and a rank left behind holds its
    GPU and blocks the port. Exit at once if the agent is already gone (reparented to init)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:
        os._exit(1)


def hold_off_sigterm() -> None:
    """This rank is about to end with its one line: a SIGTERM from torchrun's agent, which it sends
    as soon as another rank has ended, must not cut that line off (the agent's SIGKILL after its
    shutdown timeout still bounds the exit)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def close_world() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def broadcast_object(obj: object, world: World) -> object:
    """Rank 0's ``obj`` on every rank (the others pass anything). A pickled CPU broadcast, for
    commands and batches: tensors in ``obj`` travel through the host."""
    if not world.distributed:
        return obj
    box = [obj if world.leader else None]
    torch.distributed.broadcast_object_list(box, src=0, device=collective_device())
    return box[0]


def collective_device() -> torch.device:
    """Where a collective's tensors must be: the rank's GPU under NCCL, the host under gloo."""
    return torch.device("cuda", torch.cuda.current_device()) \
        if torch.distributed.get_backend() == "nccl" else torch.device("cpu")


class RankLost(AsyncRLError):
    """The job lost a rank: another rank failed or was killed (this rank's collective failed), or
    stopped answering (:class:`RankTimeout`). ``quiet``: another rank has said it already."""

    quiet = False


class RankTimeout(RankLost):
    """A rank did not answer within ``trainer.fsdp.timeout_s``: a collective timed out, or a rank's
    heartbeat stopped (asyncrl.distributed.liveness)."""


def lost_message(rank: int, cause: BaseException) -> str:
    first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    return (f"trainer rank {rank}: another rank of the job failed or was killed ({first[:200]}); torchrun's "
            "summary names it")


def lost_rank(err: BaseException) -> bool:
    """``err`` is a collective's failure on a peer's death (gloo: the connection closed; NCCL: a
    communicator error), not this rank's own fault."""
    if isinstance(err, torch.distributed.DistError):
        return True
    text = str(err)
    return any(mark in text for mark in ("Connection closed by peer", "Connection reset by peer", "NCCL error"))


def timed_out(err: BaseException) -> bool:
    """``err`` is a collective that waited out the group's timeout (gloo: "Timed out waiting 10000ms
    for recv operation"; NCCL: the watchdog's timeout, raised once clean-up-only error handling aborted
    the communicator)."""
    text = str(err)
    if isinstance(err, torch.distributed.DistError):
        return "timed out" in text.lower() or "timeout" in text.lower()
    return isinstance(err, RuntimeError) and "gloo" in text and "Timed out waiting" in text
