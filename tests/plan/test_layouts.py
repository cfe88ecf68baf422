"""``asyncrl plan --gpus N`` chooses a layout of the N GPUs (asyncrl.plan.layouts): 7B on 8 GPUs fits
every GPU of the layout chosen, small models keep the engines beside rank 0, the weight channel's
buffers on rank 0 are counted, and the printed commands load as ``asyncrl train`` loads them."""

import shlex
from dataclasses import replace

import pytest

from asyncrl.cli import main
from asyncrl.config import load_config
from asyncrl.plan.estimate import GIB, PRESETS, PlanInputs, Rates, inputs_from_config, memory, step_time
from asyncrl.plan.layouts import BESIDE, OWN, choose, commands, plan_layouts

RATES = Rates()


def _layouts(size: str, gpus: int, overrides=(), trainers=None):
    return plan_layouts("gpu-gsm8k", list(overrides), PRESETS[size], gpus, 256, RATES, trainers=trainers)


def test_7b_on_8_gpus_chooses_a_layout_that_fits_every_gpu():
    layouts = _layouts("7B", 8)
    assert [(lay.kind, lay.trainers, lay.rollout_gpus) for lay in layouts] == \
        [(BESIDE, 8, 0)] + [(OWN, t, 8 - t) for t in range(7, 0, -1)]
    chosen = choose(layouts, RATES)
    assert chosen.kind == OWN and chosen.trainers + chosen.rollout_gpus == 8
    assert chosen.fits(RATES) and all(role.total <= 80 * GIB for role in chosen.roles)
    assert sum(role.count for role in chosen.roles) == 8  # every GPU of the node has its line
    # the shortest step of the layouts that fit: 6 trainer ranks, generation on 2 GPUs
    fitting = [lay for lay in layouts if lay.fits(RATES)]
    assert chosen.time.step == min(lay.time.step for lay in fitting)
    assert (chosen.trainers, chosen.rollout_gpus, chosen.channel) == (6, 2, "ray")
    # the old answer, vLLM and the CUDA channel beside rank 0, is listed and does not fit: its
    # channel's two bf16 buffers are in rank 0's total
    beside = layouts[0]
    rank0 = memory(beside.inputs, RATES)
    assert rank0.lines["weight channel buffers"][0] == 2 * PRESETS["7B"].params * 2
    assert not beside.fits(RATES) and beside.roles[0].total > 110 * GIB


def test_cli_7b_on_8_gpus_prints_a_layout_that_fits_and_its_commands(capsys):
    assert main(["plan", "--model", "7B", "--gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert "8 GPU(s): 6 trainer GPUs + 2 rollout GPUs" in out.splitlines()[0]
    table = out[out.index("every GPU of the job"):out.index("layouts of 8 GPUs")]
    rows = [line for line in table.splitlines() if line.strip().startswith(("trainer rank", "rollout GPU"))]
    assert len(rows) == 3 and all(" yes " in row for row in rows), rows
    assert "▶ 6 trainer GPUs + 2 rollout GPUs" in out and "8 trainer GPUs, rollout beside rank 0" in out
    assert "layout: 6 trainer GPUs + 2 rollout GPUs (fits every GPU); run it on one machine with:" in out
    lines = [line.strip() for line in out.splitlines()]
    assert "CUDA_VISIBLE_DEVICES=6,7 ray start --head --num-gpus 2" in lines
    train = next(line for line in lines if line.startswith("RAY_ADDRESS=auto asyncrl train"))
    args = shlex.split(train)[1:]
    assert args[:6] == ["asyncrl", "train", "--nproc-per-node", "6", "--config", "gpu-gsm8k"]
    # the printed keys exist and load as asyncrl train loads them: Ray actors on two GPUs of their own
    cfg = load_config("gpu-gsm8k", args[6:], ignore=("task", "reward"))
    assert inputs_from_config(cfg, PRESETS["7B"], 6, 256).dedicated_workers == 2


def test_small_models_keep_the_engine_beside_rank_0(capsys):
    """One GPU: the only layout, planned exactly as before (the same numbers), no layout table."""
    assert main(["plan", "--model", "1.5B", "--gpus", "1"]) == 0
    out = capsys.readouterr().out
    cfg = load_config("gpu-gsm8k", ignore=("task", "reward"))
    single = memory(inputs_from_config(cfg, PRESETS["1.5B"], 1, 256), RATES)
    total = next(line for line in out.splitlines() if line.strip().startswith("GPU total"))
    assert f" {single.total / GIB:.2f} " in total and "fits in 80 GiB" in total
    assert "layouts of" not in out and "1 GPU(s): 1 trainer GPU, rollout beside rank 0" in out
    assert "asyncrl train --config gpu-gsm8k" in out and "ray" not in out.split("run it on one machine with:")[1]
    # on 2 GPUs the step is generation-bound either way (13.1 s): the tie keeps the engines beside rank 0
    chosen = choose(_layouts("1.5B", 2), RATES)
    assert (chosen.kind, chosen.trainers) == (BESIDE, 2) and chosen.fits(RATES)


def test_the_collective_channel_counts_a_buffer_per_worker_send_and_changes_the_choice():
    seven = PlanInputs(model=PRESETS["7B"], gpus=6, fsdp_bf16=True, rollout_workers=0, cuda_channel=False,
                       dedicated_workers=2, collective=True)
    flat = PRESETS["7B"].params * 2
    assert memory(seven).lines["weight channel buffers"][0] == 3 * flat  # 1 + one per worker's send
    assert step_time(seven).broadcast_bytes - step_time(replace(seven, collective=False)).broadcast_bytes == flat
    collective = ["async.backend=ray", "async.gpus_per_worker=1", "async.weight_channel=collective"]
    layouts = _layouts("7B", 8, collective)
    assert layouts[0].overrides == {"async.backend": "local", "async.weight_channel": "auto"}  # beside: CUDA IPC
    chosen = choose(layouts, RATES)
    # 6 + 2 would put 43.06 + 3 × 14.19 GiB on rank 0: 7 trainer ranks and one rollout GPU fit
    assert (chosen.trainers, chosen.rollout_gpus, chosen.channel) == (7, 1, "collective") and chosen.fits(RATES)
    rank0 = chosen.roles[0].items["weight channel buffers"][0]
    assert rank0 == 2 * flat


def test_generation_divides_over_the_rollout_gpus():
    one = PlanInputs(model=PRESETS["1.5B"], gpus=2, rollout_workers=0, cuda_channel=False, dedicated_workers=1)
    four = replace(one, dedicated_workers=4)
    assert step_time(one).generation == pytest.approx(4 * step_time(four).generation)
    assert step_time(four).rollout_gpus == 4


def test_pinned_layouts_and_their_refusals(capsys):
    pinned = _layouts("7B", 9, trainers=8)
    assert [(lay.kind, lay.trainers, lay.rollout_gpus) for lay in pinned] == [(OWN, 8, 1)]
    assert commands(pinned[0], "gpu-gsm8k", [])[0] == "CUDA_VISIBLE_DEVICES=8 ray start --head --num-gpus 1"
    one_trainer = _layouts("1.5B", 4, trainers=1)[0]  # its private Ray cluster leaves its GPU out
    assert commands(one_trainer, "gpu-gsm8k", []) == [
        "asyncrl train --config gpu-gsm8k async.backend=ray async.gpus_per_worker=1 async.n_workers=3"]
    for argv, names in ((["--gpus", "2", "--trainer-gpus", "3"], "--trainer-gpus: must be between 1 and --gpus (2)"),
                        (["--gpus", "2", "--trainer-gpus", "1", "run.mode=sync", "rollout.engine=transformers"],
                         "--trainer-gpus: 1 of 2 GPUs leaves rollout GPUs of their own"),
                        (["--gpus", "2", "run.mode=sync"], "rollout.engine: vllm with run.mode=sync runs inside")):
        assert main(["plan", "--model", "1.5B", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"asyncrl: {names}") and err.count("\n") == 1, err
