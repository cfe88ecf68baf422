"""``asyncrl train --nproc-per-node N``: torchrun's agent in this process, starting N trainer ranks on
this machine, with the job's end said as asyncrl says it.

Under a plain ``torchrun``, a rank that ends with its one line and exit status 2 is followed by the
agent's own report: a Python traceback of ``ChildFailedError``, a summary of every rank, and exit
status 1, whatever the ranks' statuses were. torchrun offers no way to change that from inside a
rank. Here the same agent (``torch.distributed.run``) runs in this process instead, and:
- its one store, which the ranks share, listens on 127.0.0.1 only (torchrun's own rendezvous would
  listen on every interface: asyncrl.distributed.loopback_rendezvous), and the ranks' gloo and
  NCCL sockets on the loopback interface (asyncrl.distributed.listeners);
- its log lines and its report are not printed: the ranks say what went wrong, once;
- the exit status is the job's: that of the first rank (by rank) that exited on its own with an
  error (2 for a configuration error, 1 for a lost rank), else 128 + the signal that ended a rank;
- on SIGTERM or SIGINT the agent forwards the signal to the ranks (rank 0 checkpoints and says so)
  and exits 128 + its number; ranks that do not end within the agent's shutdown timeout
  (``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, 30 s) are SIGKILLed. When a rank was killed and no rank has
  said why (a rank that does marks it in the file ``ASYNCRL_LAUNCH_SAID`` names), one line here
  says so;
- a rank lost (killed by a signal: out of memory, SIGKILL, a crash), whose death the agent sees and
  answers by stopping the others, is named here, in one line with where the run continues (rank 0
  keeps that in a file beside ``ASYNCRL_LAUNCH_SAID``): the survivors cannot tell which rank it was,
  and on NCCL one blocked in a collective ends only by the agent's SIGKILL. A survivor whose
  collective failed on the lost rank says nothing then, and marks that it found one.
Several machines still need ``torchrun`` itself (docs/scaling.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import tempfile
import uuid
from pathlib import Path

AGENT_LOGGERS = ("torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launcher")
KILLED_MARK = "Unable to shutdown process"  # the agent's warning as it SIGKILLs a rank after its timeout
SAID_ENV = "ASYNCRL_LAUNCH_SAID"  # a file a rank creates once it has said why the job ends (liveness.Peers)
LOST, RESUME = "lost", "resume"  # beside it: lost.<rank>, that rank found a lost one; where the run continues


def rank_command(args) -> list[str]:
    """The ``asyncrl`` arguments every rank runs: the parsed ``train`` command without the launcher's option."""
    return ["train", *(["--config", args.config] if args.config else []),
            *(["--resume", args.resume] if args.resume else []), *args.overrides]


def launch(nproc: int, command: list[str]) -> int:
    """Run ``python -m asyncrl <command>`` as ``nproc`` ranks on this machine; the job's exit status."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    from asyncrl.distributed import loopback_rendezvous

    loopback_rendezvous.register()
    # the endpoint is not used: given none, torchrun would warn that --master-addr is ignored
    args = parse_args(["--nproc-per-node", str(nproc), "--rdzv-backend", loopback_rendezvous.BACKEND,
                       "--rdzv-endpoint", "127.0.0.1:0", "--rdzv-id", uuid.uuid4().hex, "-m", "asyncrl", *command])
    with _agent_quiet() as killed, tempfile.TemporaryDirectory(prefix="asyncrl-launch-") as folder:
        said = Path(folder) / "said"
        os.environ[SAID_ENV] = str(said)  # the ranks inherit it
        try:
            run(args)
        except ChildFailedError as err:
            codes = {rank: failure.exitcode for rank, failure in err.failures.items()}  # in the order found
            # a first rank that ended on its own status said why (or printed its traceback)
            found = {int(path.suffix[1:]) for path in said.parent.glob(f"{LOST}.*")}
            if not said.exists() and (found or next(iter(codes.values())) < 0):
                print(lost_line(codes, _read(said.with_name(RESUME)), found), file=sys.stderr)
            return job_status(codes)
        except SignalException as err:
            if killed and not said.exists():
                print(f"asyncrl: stopped by {signal.Signals(err.sigval).name}: {len(killed)} trainer rank(s) did not "
                      f"end within torchrun's shutdown timeout ({_shutdown_timeout(args)} s) and were killed (a "
                      "stopped or hung rank); no checkpoint of this stop", file=sys.stderr)
            return 128 + int(err.sigval)
        finally:
            os.environ.pop(SAID_ENV, None)
    return 0


def note(name: str, text: str = "") -> None:
    """Under ``asyncrl train --nproc-per-node``: ``text`` in the file ``name`` beside the one
    ``ASYNCRL_LAUNCH_SAID`` names, replaced whole (the launcher may read it at any time); else nothing."""
    said = os.environ.get(SAID_ENV)
    if not said:
        return
    path = Path(said).with_name(name)
    part = path.with_name(f".{name}.{os.getpid()}")
    with contextlib.suppress(OSError):
        part.write_text(text)
        part.replace(path)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def lost_line(codes: dict[int, int], resume: str, survivors: set[int] = frozenset()) -> str:
    """The job's line when it lost a rank and no rank said so, from the failed ranks' ``{rank: exit
    code}`` in the order the agent found them (negative: killed by that signal; the ranks it stopped
    come after the one it saw end): the first that is not one of ``survivors`` (ranks that found
    the lost one and ended on their own, maybe in the agent's same look); ``resume``: where the run
    continues (rank 0's :func:`note`), or ""."""
    lost = next((rank for rank in codes if rank not in survivors), next(iter(codes)))
    code = codes[lost]
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        what = f"was killed by {name} (out of memory, or killed from outside)"
    else:
        what = f"failed (exit status {code})"
    return f"asyncrl: trainer rank {lost} {what}; the other ranks were stopped" + (f"; {resume}" if resume else "")


def job_status(codes: dict[int, int]) -> int:
    """The job's exit status from its failed ranks' ``{rank: exit code}`` (negative: killed by that
    signal): the first rank's own error status, else 128 + the signal that ended the first."""
    ranked = [codes[rank] for rank in sorted(codes)]
    own = [code for code in ranked if code > 0]
    return own[0] if own else 128 - ranked[0]


def _shutdown_timeout(args) -> str:
    """The agent's (``PET_SHUTDOWN_TIMEOUT``, else ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, else 30 s)."""
    return str(args.shutdown_timeout if args.shutdown_timeout is not None
               else os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "30"))


class _Killed(logging.Handler):
    """Keeps the pids of the ranks the agent had to SIGKILL (its warning says so)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.pids: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith(KILLED_MARK) and record.args:
            self.pids.append(record.args[0])


@contextlib.contextmanager
def _agent_quiet():
    """The agent's loggers print nothing for the time of the job; yields the SIGKILLed ranks' pids."""
    loggers = [logging.getLogger(name) for name in AGENT_LOGGERS]
    saved = [(logger.propagate, logger.level) for logger in loggers]
    handler = _Killed()
    loggers[0].addHandler(handler)
    for logger in loggers:
        logger.propagate = False
        logger.setLevel(logging.WARNING)
    try:
        yield handler.pids
    finally:
        loggers[0].removeHandler(handler)
        for logger, (propagate, level) in zip(loggers, saved):
            logger.propagate = propagate
            logger.setLevel(level)
