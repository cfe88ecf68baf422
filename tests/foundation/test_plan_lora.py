"""``asyncrl plan`` with LoRA (``policy.lora_rank`` > 0): the adapter count against what peft builds on
a tiny Qwen2, the memory lines by hand, the saved activations against autograd's own, and the
comparison with full fine-tuning of the same run."""

from dataclasses import replace

import pytest
import torch

from asyncrl.cli import main
from asyncrl.config import PolicyConfig
from asyncrl.plan import estimate as plan
from asyncrl.plan import lora as lora_shapes
from asyncrl.plan.estimate import GIB, PlanInputs
from asyncrl.plan.lora import LoraPlan
from test_plan import SMALL, SMALL_RUN, _recipe  # tests/foundation: the shapes worked by hand there

peft = pytest.importorskip("peft")

# hidden 32, 4 heads of 8 (2 KV heads), MLP 48, 2 layers: every linear layer a different shape
TINY_QWEN2 = dict(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, tie_word_embeddings=True)


def _tiny_qwen2(layers: int = 2, dtype=torch.float32):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(**{**TINY_QWEN2, "num_hidden_layers": layers}, attn_implementation="sdpa")
    return Qwen2ForCausalLM(config).to(dtype)


@pytest.mark.parametrize("targets", [None, list(lora_shapes.LAYER_LINEARS), ["o_proj", "down_proj"]],
                         ids=["peft-default", "all", "o-down"])
def test_adapter_count_is_what_peft_builds(targets):
    from asyncrl.policy.lora import apply_lora

    policy = PolicyConfig(lora_rank=4, lora_target_modules=targets)
    model = apply_lora(_tiny_qwen2(dtype=torch.bfloat16), policy)
    trained = [p for p in model.parameters() if p.requires_grad]
    shape = plan.shape_from_config(model.get_base_model().config.to_dict(), "tiny")
    lora = lora_shapes.lora_plan(policy, shape.model_type)
    assert lora_shapes.adapter_params(shape, lora) == sum(p.numel() for p in trained) > 0
    # float32 adapters over bf16 base weights (what ADAPTER_BYTES assumes)
    assert {p.dtype for p in trained} == {torch.float32} and lora_shapes.ADAPTER_BYTES == 4
    # the frozen base weights are what the plan counts as P
    assert sum(p.numel() for p in model.parameters() if not p.requires_grad) == shape.params


def test_small_config_with_lora_by_hand():
    lora = replace(SMALL_RUN, lora=LoraPlan(2, ("q_proj", "v_proj")))
    mem = plan.memory(lora)
    # adapters per layer: q 2·(8 + 8) = 32, v 2·(8 + 4) = 24; two layers: 112 float32 parameters
    assert (mem.lines["parameters"][0], mem.lines["gradients"][0], mem.lines["AdamW state"][0]) == (
        4 * 1480 + 4 * 112, 4 * 112, 2 * 4 * 112)
    # a frozen layer keeps 8h + 4a·qh + 3a·I = 64 + 128 + 192 per position; the adapters their
    # rank-2 middles (2 · 2 · 4) and q/v's shared input once (4·8): 432; × 8 positions + the float
    # mask 128 = 3584 per layer, 7168 for two; the frozen final norm keeps its input alone (4·8) +
    # cos/sin 32 = 64 per position (512), and the head's completion states 128: 7808
    assert lora_shapes.layer_bytes_per_token(SMALL, lora.lora, 4, 4, False, 4) == 432
    assert mem.lines["activations, no checkpointing"][0] == 7808
    # the frozen head has no [V, h] gradient: 4·c·V + max(4·c·V, 0) = 384 + 384
    assert mem.lines["log-prob logits chunk"][0] == 768
    # the merge copies q and v's weights (8·8 + 8·4 per layer, float32): 768; no tied-embedding gradient
    assert mem.lines["merged adapted weights"][0] == 768
    assert mem.peak_moment == "backward start" and mem.peak == 6368 + 896 + 7808 + 768
    assert plan.step_time(lora).flop_factor == 4  # forward + the input gradient; no weight gradient


def test_lora_needs_less_memory_than_full_fine_tuning():
    full = plan.inputs_from_config(_recipe(), plan.PRESETS["1.5B"], 1, 256)
    lora = plan.inputs_from_config(_lora_recipe(16), plan.PRESETS["1.5B"], 1, 256)
    assert full.lora is None and lora.lora == LoraPlan(16, ("q_proj", "v_proj"))  # peft's Qwen2 default
    m_full, m_lora = plan.memory(full), plan.memory(lora)
    adapters = 28 * 16 * ((1536 + 1536) + (1536 + 256))  # q and v of 28 layers
    assert m_lora.lines["AdamW state"][0] == 2 * 4 * adapters < m_full.lines["AdamW state"][0] / 500
    assert m_lora.lines["gradients"][0] == 4 * adapters < m_full.lines["gradients"][0] / 500
    assert m_lora.lines["parameters"][0] == m_full.lines["parameters"][0] + 4 * adapters  # base kept whole
    assert m_lora.lines["activations, checkpointing"][0] < m_full.lines["activations, checkpointing"][0]
    assert m_lora.peak < m_full.peak - m_full.lines["AdamW state"][0]
    assert plan.step_time(lora).training < plan.step_time(full).training


def _lora_recipe(rank: int, *more: str):
    from asyncrl.config import load_config

    return load_config("gpu-gsm8k", [f"policy.lora_rank={rank}", *more], ignore=("task", "reward"))


def _saved_bytes(model, autocast: bool, ids, mask) -> int:
    """Bytes autograd keeps for the backward pass of a forward pass of ``model``'s decoder (each
    storage once; the parameters themselves left out)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            model.model(input_ids=ids, attention_mask=mask)
    return sum(seen.values())


@pytest.mark.parametrize("dtype, autocast, targets, dropout", [
    (torch.float32, False, ("q_proj", "v_proj"), 0.0),
    (torch.float32, False, ("q_proj", "v_proj", "o_proj", "down_proj"), 0.1),
    (torch.bfloat16, False, ("q_proj", "v_proj", "down_proj"), 0.0),
    (torch.float32, True, ("q_proj", "k_proj", "o_proj", "gate_proj", "up_proj"), 0.1),
], ids=["fp32", "fp32-dropout", "bf16", "autocast-dropout"])
def test_one_layers_saved_tensors_match_the_formula(dtype, autocast, targets, dropout):
    """A layer's share: what a 3-layer model saves minus a 2-layer one, per token position."""
    rows, seq = 2, 16
    ids = torch.randint(0, 50, (rows, seq), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding: the float mask of every layer
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules=list(targets),
                             task_type="CAUSAL_LM")
    saved = []
    for layers in (2, 3):
        model = peft.get_peft_model(_tiny_qwen2(layers, dtype), config).get_base_model().train()
        saved.append(_saved_bytes(model, autocast, ids, mask))
    shape = plan.shape_from_config(dict(TINY_QWEN2, model_type="qwen2"), "tiny")
    w = 2 if dtype == torch.bfloat16 else 4
    inputs = PlanInputs(model=replace(shape, layers=1), batch_rows=rows, minibatches=1, prompt_tokens=8,
                        new_tokens=seq - 8, weight_dtype="float32" if w == 4 else "bfloat16", autocast=autocast,
                        grad_ckpt=False, device="cpu", lora=LoraPlan(4, targets, dropout > 0))
    r, a, _ = plan.precision(inputs)
    estimate = (lora_shapes.layer_bytes_per_token(shape, inputs.lora, r, a, autocast, 4) * rows * seq
                + rows * seq * seq * a + plan.autocast_copies(inputs))
    # what the formula leaves out (as the full fine-tuning one does): each RMSNorm's float32 1/rms
    # and SDPA's float32 log-sum-exp per head, 8 + 4·heads bytes per position
    left_out = (8 + 4 * shape.heads) * rows * seq
    assert 0 <= (saved[1] - saved[0]) - estimate <= left_out, (saved[1] - saved[0], estimate)


def test_cli_plans_lora(capsys):
    assert main(["plan", "--model", "1.5B", "policy.lora_rank=16"]) == 0
    out = capsys.readouterr().out
    assert "LoRA rank 16 on q_proj, v_proj: 2,179,072 adapter parameters train (float32)" in out
    mem = plan.memory(plan.inputs_from_config(_lora_recipe(16), plan.PRESETS["1.5B"], 1, 256))
    assert f"{mem.total / GIB:.2f}" in out and "merged adapted weights" in out


@pytest.mark.parametrize("argv, names", [
    (["--gpus", "2", "--trainer-gpus", "2", "policy.lora_rank=8"],
     "policy.lora_rank: LoRA runs with one trainer process only"),
    (["policy.lora_rank=8", "policy.lora_target_modules=[q_proj,lm_head]"],
     "policy.lora_target_modules: asyncrl plan models adapters on a decoder layer's q_proj"),
])
def test_cli_plan_lora_bad_input_is_one_line(argv, names, capsys):
    assert main(["plan", "--model", "1.5B", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"asyncrl: {names}") and err.count("\n") == 1 and "Traceback" not in err
