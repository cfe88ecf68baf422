"""Tied weights cross the weight channels once: the flat buffers of a tied model are smaller by the
LM head, and a pull reproduces every weight exactly, tied or untied, into a receiver that ties the
pair itself or not. The Ray channel publishes in the generation dtype (its store is faked here)."""

from __future__ import annotations

import copy
import multiprocessing as mp
from types import SimpleNamespace

import pytest
import torch

from asyncrl.runtime.channels import flat as flat_channel


def _untied(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with an LM head of its own (a copy of the embedding's values)."""
    model = copy.deepcopy(model)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    return model


def _perturbed(model: torch.nn.Module) -> torch.nn.Module:
    model = copy.deepcopy(model)
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)))
    return model


def _blank(model: torch.nn.Module, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    model = copy.deepcopy(model).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model


def _assert_same(received: torch.nn.Module, sent: torch.nn.Module, dtype: torch.dtype) -> None:
    got, want = received.state_dict(), sent.state_dict()
    assert got.keys() == want.keys()
    for name in want:
        assert torch.equal(got[name], want[name].to(dtype)), name


@pytest.fixture(scope="module")
def tied_model(tiny_policy):
    model = copy.deepcopy(tiny_policy[0])
    assert model.lm_head.weight is model.model.embed_tokens.weight  # the embedded model ties its head
    return model


def test_flat_layout_holds_a_tied_head_once(tied_model):
    untied = _untied(tied_model)
    head = tied_model.lm_head.weight.numel()
    assert flat_channel.tied_names(tied_model.state_dict()) == {"lm_head.weight": "model.embed_tokens.weight"}
    assert flat_channel.tied_names(untied.state_dict()) == {}
    names = [name for name, _ in flat_channel.weight_layout(tied_model)]
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    assert [name for name, _ in flat_channel.weight_layout(untied)] == list(untied.state_dict())
    tied_channel = flat_channel.HostSharedWeights.create(tied_model, mp.get_context("spawn"))
    untied_channel = flat_channel.HostSharedWeights.create(untied, mp.get_context("spawn"))
    assert untied_channel.flat.shape[1] - tied_channel.flat.shape[1] == head


@pytest.mark.parametrize("sender_tied,receiver_tied", [(True, True), (True, False), (False, False)])
def test_shm_pull_reproduces_the_weights(tied_model, sender_tied, receiver_tied):
    sender = _perturbed(tied_model if sender_tied else _untied(tied_model))
    channel = flat_channel.HostSharedWeights.create(sender, mp.get_context("spawn"))
    channel.publish(sender, 1)
    receiver = _blank(tied_model if receiver_tied else _untied(tied_model))
    assert channel.pull(receiver) == 1
    _assert_same(receiver, sender, torch.float32)
    if receiver_tied:
        assert receiver.lm_head.weight is receiver.model.embed_tokens.weight


class _FakeRay:
    """``ray.put``/``ray.get`` in one process; what is put is kept (read-only, as Ray's store is)."""

    def __init__(self):
        self.put_objects = []

    def put(self, obj):
        obj = obj.copy()
        obj.flags.writeable = False
        self.put_objects.append(obj)
        return ("ref", len(self.put_objects) - 1)

    def get(self, value):
        if isinstance(value, tuple) and value[:1] == ("ref",):
            return self.put_objects[value[1]]
        return value


class _FakeStore:
    def __init__(self):
        state = {"version": -1, "ref": None}
        self.set = SimpleNamespace(remote=lambda version, refs: state.update(version=version, ref=refs[0]))
        self.latest = SimpleNamespace(remote=lambda: state["version"])
        self.get = SimpleNamespace(remote=lambda: (state["version"], [state["ref"]]))


@pytest.fixture()
def ray_store():
    """The Ray channel's module, which imports ray (the ``ray`` extra): skipped where it is missing."""
    pytest.importorskip("ray")
    from asyncrl.runtime.ray import store as ray_store

    return ray_store


@pytest.fixture()
def fake_ray(monkeypatch, ray_store):
    fake = _FakeRay()
    monkeypatch.setattr(ray_store, "ray", fake)
    monkeypatch.setattr(ray_store, "WeightStore", SimpleNamespace(remote=_FakeStore))
    return fake


@pytest.mark.parametrize("sender_tied,receiver_tied", [(True, True), (True, False), (False, False)])
def test_ray_publishes_the_generation_dtype_once_per_tensor(fake_ray, ray_store, tied_model, sender_tied,
                                                            receiver_tied):
    sender = _perturbed(tied_model if sender_tied else _untied(tied_model))
    channel = ray_store.open_ray(sender, dtype=torch.bfloat16, device="cpu", ctx=None)
    channel.publish(sender, 2)
    unique = sum(t.numel() for name, t in sender.state_dict().items()
                 if not (sender_tied and name == "lm_head.weight"))
    assert channel.host_copy(sender).dtype == torch.bfloat16
    assert fake_ray.put_objects[-1].nbytes == 2 * unique  # bf16 bytes, the tied head not repeated
    received = copy.deepcopy(channel)  # what an actor gets: the handle without the trainer's buffer
    assert received._host is None
    receiver = _blank(tied_model if receiver_tied else _untied(tied_model), torch.bfloat16)
    assert received.latest() == 2 and received.pull(receiver) == 2
    _assert_same(receiver, sender, torch.bfloat16)


def test_ray_buffer_is_pinned_only_for_gpu_weights(monkeypatch, ray_store):
    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    real_empty = torch.empty  # the pinned request is only recorded: this torch may have no CUDA

    def empty(*args, pin_memory=False, **kwargs):
        asked.append(pin_memory)
        return real_empty(*args, **kwargs)

    monkeypatch.setattr(torch, "empty", empty)
    ray_store.host_buffer(4, torch.bfloat16, torch.device("cpu"))
    ray_store.host_buffer(4, torch.bfloat16, torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    ray_store.host_buffer(4, torch.bfloat16, torch.device("cuda", 0))
    assert asked == [False, True, False]
