"""``asyncrl plan``'s per-GPU table (asyncrl.plan.gpus): every GPU of a job, rank 0 without an fp32
replica, a rollout GPU sized as the worker sizes vLLM's share."""

from dataclasses import replace

from asyncrl.cli import main
from asyncrl.plan.estimate import GIB, PRESETS, PlanInputs, Rates, memory, vllm_need
from asyncrl.plan.gpus import CUDA_CONTEXT_BYTES, job_gpus
from asyncrl.rollout import vllm_memory

ROLLOUT_GPU = ["async.backend=ray", "async.gpus_per_worker=1", "async.weight_channel=collective"]
KV_SIZED = ["rollout.engine_kwargs={dtype: bfloat16, max_model_len: 1024}"]
SEVEN_B = PlanInputs(model=PRESETS["7B"], gpus=8, fsdp_bf16=True, rollout_workers=0, cuda_channel=False,
                     dedicated_workers=1, collective=True)


def test_rank_0_holds_a_generation_replica_not_an_fp32_one():
    shape = PRESETS["7B"]
    rank0, rank1 = memory(SEVEN_B), memory(SEVEN_B, rank=1)
    assert rank0.lines["generation replica"][0] == shape.params * 2  # bf16, not P·4
    assert rank0.lines["largest parameter gathered"][0] == 4 * shape.vocab * shape.hidden  # not the whole model
    assert not {"rank-0 replica", "weight gather after the step"} & set(rank0.lines)
    assert "generation replica" not in rank1.lines and rank0.peak - rank1.peak == shape.params * 2


def test_the_7b_job_on_8_gpus_fits_every_gpu():
    roles = {role.role: role for role in job_gpus(SEVEN_B)}
    assert set(roles) == {"trainer rank 0", "trainer ranks 1-7", "rollout GPU (vllm)"}
    assert roles["trainer ranks 1-7"].count == 7 and all(role.fits(Rates()) for role in roles.values())
    rollout = roles["rollout GPU (vllm)"].items
    weights = PRESETS["7B"].params * 2
    assert rollout["staging copy"][0] == rollout["channel receive buffer"][0] == weights
    # rank 0's side of the collective channel: one buffer, and one more while a send overlaps a publish
    assert roles["trainer rank 0"].items["weight channel buffers"][0] == 2 * weights
    free_for_vllm = 80 * GIB - 2 * weights - CUDA_CONTEXT_BYTES - vllm_memory.CONTEXT_HEADROOM_BYTES
    assert vllm_need(SEVEN_B).total == rollout["vLLM share"][0] <= free_for_vllm  # the KV need fits


def test_a_32b_rollout_gpu_is_refused_and_does_not_fit():
    inputs = replace(SEVEN_B, model=PRESETS["32B"], gpus=32)
    rollout = job_gpus(inputs)[-1]
    assert rollout.refused.startswith("vLLM needs") and not rollout.fits(Rates())


def test_colocated_1_5b_share_is_the_kv_need_not_0_35():
    inputs = PlanInputs(model=PRESETS["1.5B"], vllm_positions=1024)
    engine = memory(inputs).lines["rollout engine"][0] - PRESETS["1.5B"].params * 2  # less the staging copy
    kv = 2 * 28 * 2 * 128 * 2 * 256 * 1024
    assert engine == PRESETS["1.5B"].params * 2 + kv + vllm_memory.MARGIN_BYTES < 0.35 * 80 * GIB / 2
    pinned = memory(replace(inputs, kv_sized=False)).lines["rollout engine"][0] - PRESETS["1.5B"].params * 2
    assert pinned == int(0.35 * 80 * GIB)


def test_cli_prints_one_line_per_gpu_role(capsys):
    # 8 trainer GPUs and a rollout GPU: 9 GPUs, the layout pinned (--gpus counts every GPU of the job)
    assert main(["plan", "--model", "7B", "--gpus", "9", "--trainer-gpus", "8", *KV_SIZED, *ROLLOUT_GPU]) == 0
    out = capsys.readouterr().out
    table = out[out.index("every GPU of the job"):]
    for role in ("trainer rank 0 ", "trainer ranks 1-7 ", "rollout GPU (vllm) "):
        line = next(line for line in table.splitlines() if role in line)
        assert " yes " in line, line
    assert "channel receive buffer 14.19" in table  # 7.62B parameters in bf16
    assert main(["plan", "--model", "32B", "--gpus", "33", "--trainer-gpus", "32", *KV_SIZED, *ROLLOUT_GPU]) == 0
    assert "NO: vLLM needs" in capsys.readouterr().out


def test_async_channel_buffers_caps_what_rank_0_is_counted_for():
    """Three rollout GPUs: workers + 1 = 4 flat copies on rank 0 by default; async.channel_buffers=2
    caps the channel at 2 (a publish then waits for a send), and the plan counts 2."""
    weights = PRESETS["7B"].params * 2
    three = replace(SEVEN_B, dedicated_workers=3)
    rank0 = {role.role: role for role in job_gpus(three)}["trainer rank 0"].items
    assert rank0["weight channel buffers"][0] == 4 * weights
    capped = {role.role: role for role in job_gpus(replace(three, channel_buffers=2))}["trainer rank 0"].items
    assert capped["weight channel buffers"][0] == 2 * weights and "channel_buffers=2" in capped["weight channel buffers"][1]
