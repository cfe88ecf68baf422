"""A weight channel across a real process boundary (spawn): the child pulls what the parent
published, reports the version and a checksum of every tensor, and writes nothing back. Used by the
CPU test (host shared memory) and the gpu test (CUDA IPC)."""

from __future__ import annotations

import copy

import torch
import torch.multiprocessing as tmp


def _child(channel, model, device, dtype, request_q, result_q) -> None:
    model = model.to(device=device, dtype=dtype)
    while True:
        want = request_q.get()
        if want is None:
            return
        while channel.latest() < want:
            pass
        version = channel.pull(model)
        sums = {k: float(v.double().sum()) for k, v in model.state_dict().items()}
        result_q.put((version, sums))


def round_trip(model: torch.nn.Module, channel_name: str, device: str, dtype: torch.dtype):
    """Publish version 0, then perturbed weights as version 3; returns [(version, sums), ...] seen by
    the child and the expected sums (the published weights cast to ``dtype``) for each."""
    from asyncrl.runtime.channels import open_channel

    ctx = tmp.get_context("spawn")
    model = model.to(device)
    channel = open_channel(channel_name, model, ctx=ctx, device=device, dtype=dtype)
    request_q, result_q = ctx.Queue(), ctx.Queue()
    blank = copy.deepcopy(model).cpu()
    with torch.no_grad():
        for p in blank.parameters():
            p.zero_()
    child = ctx.Process(target=_child, args=(channel, blank, device, dtype, request_q, result_q), daemon=True)
    child.start()
    try:
        expected, seen = [], []
        for version in (0, 3):
            if version:
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(0.01)
                channel.publish(model, version)
            expected.append({k: float(v.to(dtype).double().sum()) for k, v in model.state_dict().items()})
            request_q.put(version)
            seen.append(result_q.get(timeout=120))
        request_q.put(None)
        child.join(timeout=30)
    finally:
        if child.is_alive():
            child.kill()
    return seen, expected
