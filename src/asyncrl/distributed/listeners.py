"""Where a torchrun job's listeners bind: the rendezvous store, the store the ranks share, and
gloo's and NCCL's sockets. None of them authenticates a peer: whoever reaches a port can read and
write the job's keys, or connect to a rank's collectives.

- ``asyncrl train --nproc-per-node N`` (asyncrl.distributed.launch) runs torchrun's agent with a
  rendezvous of its own (asyncrl.distributed.loopback_rendezvous): one store, shared by the agent
  and its ranks, listening on a socket bound to 127.0.0.1. torchrun's own rendezvous (``c10d``,
  ``static``) makes TCPStores that listen on every interface, whatever host they are given.
- Every rank of a job on one machine (all ranks local, or ``MASTER_ADDR`` on loopback) binds gloo
  (``GLOO_SOCKET_IFNAME``) and NCCL (``NCCL_SOCKET_IFNAME``) to the loopback interface
  (:func:`bind_collectives`); an interface the user names wins. Otherwise gloo binds to the address
  this machine's name resolves to, which may be routable.
- A job across machines keeps torch's defaults, and rank 0 says so in one line (:func:`notice`).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from asyncrl.core.addresses import is_loopback

IFF_LOOPBACK = 0x8  # from <linux/if.h>
IFNAME_ENVS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def loopback_interface() -> str:
    """The name of this machine's loopback interface (Linux: the one flagged IFF_LOOPBACK)."""
    names = [name for _, name in socket.if_nameindex()]
    for name in names:
        try:
            if int(Path(f"/sys/class/net/{name}/flags").read_text(), 16) & IFF_LOOPBACK:
                return name
        except (OSError, ValueError):
            continue
    return "lo0" if "lo0" in names else "lo"


def one_machine(env: dict[str, str]) -> bool:
    """Every rank of the job runs on this machine: all ranks are local, or they meet on loopback
    (torchrun's agents on one machine, ``--nnodes`` > 1 on 127.0.0.1)."""
    world, local = env.get("WORLD_SIZE", "1"), env.get("LOCAL_WORLD_SIZE", "")
    return local == world or is_loopback(env.get("MASTER_ADDR", "127.0.0.1"))


def bind_collectives(env: dict[str, str] | None = None) -> None:
    """Before the process group is built: on one machine, gloo and NCCL listen on the loopback
    interface only, unless the user named an interface (``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``)."""
    env = os.environ if env is None else env
    if not one_machine(env):
        return
    name = loopback_interface()
    env.setdefault("GLOO_SOCKET_IFNAME", name)
    env.setdefault("NCCL_SOCKET_IFNAME", f"={name}")  # "=": this name exactly, not a prefix


def notice(env: dict[str, str] | None = None) -> str | None:
    """Rank 0's one line for a job across machines (None on one machine): where its store and
    collectives listen, and that nothing authenticates them."""
    env = os.environ if env is None else env
    if one_machine(env):
        return None
    named = ", ".join(f"{key}={env[key]}" for key in IFNAME_ENVS if key in env)
    sockets = f"the interfaces {named} names" if named else "the address each machine's name resolves to"
    return (f"asyncrl: warning: this job spans machines and listens unauthenticated beyond loopback: torchrun's "
            f"store at {env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')} (every interface of its machine) and the "
            f"ranks' gloo/NCCL sockets ({sockets}); keep the machines on a private network (docs/scaling.md)")
