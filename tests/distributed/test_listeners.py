"""Where a torchrun job listens (docs/scaling.md, "What listens"): ``asyncrl train --nproc-per-node 2``
listens on loopback only, its one store and both ranks' gloo sockets; a job on one machine binds
gloo and NCCL to the loopback interface unless the user names one; a job across machines keeps
torch's defaults and rank 0 says where it listens, in one line."""

import fcntl
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_torchrun import ENV, base  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from resume_campaign import descendants  # noqa: E402

from asyncrl.distributed.listeners import bind_collectives, loopback_interface, notice, one_machine  # noqa: E402

LISTEN = "0A"  # a socket's state in /proc/net/tcp
LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")
linux_only = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net/tcp")
SIOCGIFADDR = 0x8915  # from <linux/sockios.h>: an interface's IPv4 address
# sets this process's hostname (in its own UTS namespace), then becomes the command that follows
RENAME_THEN_EXEC = "import os, socket, sys; socket.sethostname(sys.argv[1]); os.execvp(sys.argv[2], sys.argv[2:])"


def _listening_table() -> dict[str, tuple[str, int]]:
    """{socket inode: (address, port)} of every listening TCP socket of this network namespace."""
    table = {}
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        path = Path("/proc/net") / name
        for line in path.read_text().splitlines()[1:] if path.exists() else []:
            cols = line.split()
            if cols[3] != LISTEN:
                continue
            address, port = cols[1].split(":")
            raw = bytes.fromhex(address)  # 32-bit words, each in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            table[cols[9]] = (socket.inet_ntop(family, raw), int(port, 16))
    return table


def listening(pids) -> set[tuple[int, str, int]]:
    """(pid, address, port) of each listening TCP socket that one of ``pids`` holds."""
    table, found = _listening_table(), set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue  # ended meanwhile
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in table:
                found.add((pid, *table[target[8:-1]]))
    return found


def _routable_address() -> str | None:
    """The IPv4 address of one of this machine's other interfaces than loopback, or None."""
    for _, name in socket.if_nameindex():
        if name == loopback_interface():
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                request = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address
        return socket.inet_ntoa(request[20:24])
    return None


def routable_hostname() -> list[str]:
    """A prefix that runs a command under a hostname resolving to a routable address of this machine
    (an address is a name that resolves to itself; a UTS namespace keeps the rename to the command),
    or [] where there is none or no namespace can be made (root only: a user namespace could hide
    the job's /proc entries from this test). Gloo binds by default to what the hostname resolves
    to: where that is 127.0.0.1 (as in most containers) a rank that did not bind gloo to loopback
    itself would still pass."""
    address = _routable_address()
    if address is None or os.geteuid() != 0:
        return []
    prefix = ["unshare", "--uts", sys.executable, "-c", RENAME_THEN_EXEC, address]
    try:
        renamed = subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        renamed = False  # no unshare, or no namespace allowed (a container without CAP_SYS_ADMIN)
    return prefix if renamed else []


@linux_only
def test_launcher_listens_on_loopback_only(tmp_path, cache):
    """Every listening socket of the agent and its two ranks, sampled for the whole run, is on
    loopback, with the hostname resolving to a routable address where one can be set. Before, the
    agent's two stores listened on every interface (``::``) and the ranks' gloo sockets on that
    address."""
    proc = subprocess.Popen([*routable_hostname(), sys.executable, "-m", "asyncrl", "train", "--nproc-per-node", "2",
                             *base(cache, "listen", 2)], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen = set()
    try:
        while proc.poll() is None:
            seen |= listening({proc.pid} | descendants(proc.pid))
            time.sleep(0.1)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert err == "", err[-3000:]  # one machine: no line about listeners
    assert [entry for entry in seen if entry[1] not in LOOPBACK] == [], seen
    owners = {pid for pid, _, _ in seen}
    # not vacuous: the agent's store and each rank's gloo socket were seen
    assert proc.pid in owners and len(owners - {proc.pid}) >= 2, seen


def test_one_machine_binds_gloo_and_nccl_to_loopback_unless_named():
    local = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.1.2.3"}
    bind_collectives(local)
    assert local["GLOO_SOCKET_IFNAME"] == loopback_interface()
    assert local["NCCL_SOCKET_IFNAME"] == f"={loopback_interface()}"  # that name exactly, not a prefix
    named = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GLOO_SOCKET_IFNAME": "eth1"}
    bind_collectives(named)
    assert named["GLOO_SOCKET_IFNAME"] == "eth1"  # the user's choice wins
    # two agents of one machine meeting on 127.0.0.1 (docs/scaling.md's loopback form of two nodes)
    assert one_machine({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"})
    assert notice(local) is None


def test_a_job_across_machines_keeps_torchs_binding_and_says_where_it_listens():
    nodes = {"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500"}
    bind_collectives(nodes)
    assert "GLOO_SOCKET_IFNAME" not in nodes and "NCCL_SOCKET_IFNAME" not in nodes
    line = notice(nodes)
    assert line.startswith("asyncrl: warning:") and "\n" not in line
    assert "10.1.2.3:29500" in line and "unauthenticated" in line and "each machine's name" in line
    assert "GLOO_SOCKET_IFNAME=ib0" in notice({**nodes, "GLOO_SOCKET_IFNAME": "ib0"})


@linux_only
def test_loopback_interface_is_the_one_flagged_loopback():
    assert loopback_interface() in {name for _, name in socket.if_nameindex()}
    assert int(Path(f"/sys/class/net/{loopback_interface()}/flags").read_text(), 16) & 0x8


@linux_only
def test_loopback_rendezvous_store_listens_on_127_0_0_1_and_serves_a_client():
    import torch

    from asyncrl.distributed.loopback_rendezvous import LoopbackRendezvous

    rendezvous = LoopbackRendezvous("run", timeout_s=30)
    info = rendezvous.next_rendezvous()
    assert (info.bootstrap_store_info.master_addr, info.bootstrap_store_info.master_port) == ("127.0.0.1",
                                                                                              rendezvous.port)
    assert rendezvous.use_agent_store and (info.rank, info.world_size) == (0, 1)
    ours = {(address, port) for _, address, port in listening([os.getpid()]) if port == rendezvous.port}
    assert ours == {("127.0.0.1", rendezvous.port)}
    client = torch.distributed.TCPStore("127.0.0.1", rendezvous.port, is_master=False)
    info.store.set("key", "value")  # the agent's keys, under the run id
    assert client.get("run/key") == b"value"
