"""How the trainer's NCCL process groups handle a failed or timed-out collective.

ProcessGroupNCCL reads two settings from the environment when a group is built, and has no option
for them: ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` (PyTorch's default, 3, lets its watchdog thread end the
whole process with SIGABRT and a C++ message) and ``TORCH_NCCL_DUMP_ON_TIMEOUT`` (a flight-recorder
dump on a timeout). The trainer wants 2, clean up only: the group's communicators are aborted and the
collective raises in the thread that called it, where asyncrl turns it into its one line (a lost rank,
asyncrl.distributed.liveness; a dead rollout worker's pair, asyncrl.runtime.channels.collective), and
no dump.

os.environ belongs to the whole process: a value set for the time of one group's construction is
seen by every other thread meanwhile (a worker process started then inherits it) and two such scopes
can restore each other's values. So the trainer sets them once, for good, from the thread that sets
up its groups and channel, before those start threads of their own (:func:`set_fault_env`), and a
rollout worker (a process, or a Ray actor), which inherits the trainer's environment, takes back the
values the trainer had before as the first thing it does (:func:`restore_env`): a worker whose pull
fails ends and is restarted rather than going on with a half-received buffer.
"""

from __future__ import annotations

import json
import os
from collections.abc import MutableMapping

FAULT_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}
SAVED_ENV = "ASYNCRL_NCCL_SAVED"  # the values FAULT_ENV replaced (JSON; null: unset), for child processes


def set_fault_env(environ: MutableMapping[str, str] | None = None) -> None:
    """:data:`FAULT_ENV` in ``environ`` (default: the process's), whatever it held, for every NCCL
    group built afterwards; what it held is kept under :data:`SAVED_ENV`. Idempotent."""
    environ = os.environ if environ is None else environ
    if SAVED_ENV not in environ:
        environ[SAVED_ENV] = json.dumps({name: environ.get(name) for name in FAULT_ENV})
    for name, value in FAULT_ENV.items():
        if environ.get(name) != value:
            environ[name] = value


def restore_env(environ: MutableMapping[str, str] | None = None) -> None:
    """In a child of the trainer, before it starts any thread: the values :func:`set_fault_env`
    replaced. A no-op where the parent set none."""
    environ = os.environ if environ is None else environ
    saved = environ.pop(SAVED_ENV, None)
    if saved is None:
        return
    for name, value in json.loads(saved).items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
