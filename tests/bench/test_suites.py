"""Suite matrices: cells, filters, resumability bookkeeping and agreement with the packaged presets."""

import math
from pathlib import Path

import pytest

from benchmarks.bench.suite_a3po import A3PO_METHODS
from benchmarks.bench.suite_atlas import ATLAS_BUFFERS, ATLAS_KS, ATLAS_LOSSES, ATLAS_MINIBATCHES, ATLAS_ROW_LOSSES
from benchmarks.bench.suites import build_cells
from asyncrl.config import load_config
from asyncrl.objectives import LOSSES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("preset", list(A3PO_METHODS))
def test_a3po_methods_match_the_preset_files(preset):
    from_file = load_config({"async-loglinear": "a3po", "async-recompute": "recompute"}.get(preset, preset)).to_dict()
    from_suite = load_config(None, [f"{k}={v}" for k, v in A3PO_METHODS[preset].items()]).to_dict()
    assert from_file == from_suite


def test_presets_differ_only_in_the_three_switches():
    dicts = [load_config(None, [f"{k}={v}" for k, v in m.items()]).to_dict() for m in A3PO_METHODS.values()]
    flat = [{f"{s}.{k}": v for s, sec in d.items() if isinstance(sec, dict) for k, v in sec.items()} for d in dicts]
    differing = {k for k in flat[0] if len({repr(f[k]) for f in flat}) > 1}
    assert differing <= {"run.mode", "trainer.prox", "loss.name", "async.max_staleness", "async.max_ahead"}


def test_a3po_cells_are_seed_major_and_unique():
    cells = build_cells("a3po", seeds=2)
    assert [c.name for c in cells] == ["sync-s0", "async-recompute-s0", "async-loglinear-s0",
                                       "sync-s1", "async-recompute-s1", "async-loglinear-s1"]
    assert all(f"run.seed={c.seed}" in c.overrides for c in cells)
    assert cells[2].params == {"mode": "async", "K": 4, "W": 1, "prox": "loglinear", "loss": "decoupled"}


def test_atlas_covers_every_loss_and_every_k_and_every_cell_config_loads():
    assert set(LOSSES) <= {spec["loss.name"] for spec in ATLAS_LOSSES.values()}
    cells = build_cells("atlas", seeds=1)
    n_rows = len(ATLAS_ROW_LOSSES) * (len(ATLAS_BUFFERS) + len(ATLAS_MINIBATCHES))
    assert len(cells) == len(ATLAS_LOSSES) * len(ATLAS_KS) + n_rows
    assert len({c.name for c in cells}) == len(cells)
    for cell in cells:
        cfg = load_config(None, list(cell.overrides))
        assert cfg.run.mode == "simulated" and cfg.loss.name == ATLAS_LOSSES[cell.method]["loss.name"]
        row = cell.params["row"]
        if row == "lag":
            assert cfg.async_.lag == cell.params["K"] and cfg.async_.policy_buffer == 0
        elif row == "buffer":
            assert cfg.async_.policy_buffer == cell.params["N"] and cfg.async_.lag == 0
        else:
            assert cfg.trainer.n_minibatches == cell.params["M"] and cfg.async_.lag == 0


def test_atlas_extra_arms():
    """Plain IS-weighted REINFORCE is TIS in bypass form with a cap no weight reaches; recompute is
    decoupled PPO with the exact proximal policy."""
    cells = {c.method: c for c in build_cells("atlas", methods=["is_reinforce", "recompute"], ks=[8], rows=["lag"])}
    is_reinforce = load_config(None, list(cells["is_reinforce"].overrides))
    assert (is_reinforce.loss.name, is_reinforce.trainer.prox) == ("tis", "none")
    assert is_reinforce.loss.params["cap"] > math.exp(20)  # log-weights are clamped to ±20
    recompute = load_config(None, list(cells["recompute"].overrides))
    assert (recompute.loss.name, recompute.trainer.prox) == ("decoupled", "recompute")
    variants = {c.method: c for c in build_cells("atlas", methods=["a3po_floor", "a3po_ess"], ks=[16], rows=["lag"])}
    assert [load_config(None, list(variants[m].overrides)).trainer.prox for m in ("a3po_floor", "a3po_ess")] == \
        ["loglinear_floor", "loglinear_ess"]


def test_only_keeps_the_matching_cells_of_every_seed_in_order():
    cells = build_cells("atlas", seeds=2, methods=["ppo", "decoupled"], ks=[0, 4, 16], rows=["lag"],
                        only=["ppo-k0", "*-k16"])
    assert [c.name for c in cells] == ["ppo-k0-s0", "ppo-k16-s0", "decoupled-k16-s0",
                                       "ppo-k0-s1", "ppo-k16-s1", "decoupled-k16-s1"]
    with pytest.raises(ValueError, match="--only: 'ppo-k2' matches no cell"):
        build_cells("atlas", methods=["ppo"], ks=[0, 4], rows=["lag"], only=["ppo-k0", "ppo-k2"])


def test_atlas_rows_filter():
    cells = build_cells("atlas", seeds=1, methods=["ppo", "tis"], rows=["buffer", "forward"])
    assert [c.name for c in cells] == ["ppo-buf4-s0", "ppo-buf8-s0", "ppo-buf16-s0", "ppo-mb1-s0", "ppo-mb16-s0"]
    with pytest.raises(ValueError, match="--rows: unknown nope"):
        build_cells("atlas", rows=["nope"])


def test_extra_overrides_win_and_filters_apply():
    cells = build_cells("atlas", quick=True, methods=["tis"], ks=[3], extra=["trainer.steps=2"])
    assert [c.name for c in cells] == ["tis-k3-s0"]
    assert load_config(None, list(cells[0].overrides)).trainer.steps == 2


def test_full_suite_defaults_yield_to_the_config_file(tmp_path):
    def resolved(config, quick=False):
        [cell] = build_cells("atlas", quick=quick, seeds=1, methods=["ppo"], ks=[0], rows=["lag"],
                              config=config)
        return load_config(config, list(cell.overrides))

    assert resolved(None).trainer.steps == 100  # the suite's default
    preset_steps = load_config("staleness-testbed", []).trainer.steps
    assert preset_steps != 100 and resolved("staleness-testbed").trainer.steps == preset_steps  # the preset wins
    assert resolved("staleness-testbed").eval.cache_initial  # a default the preset leaves alone
    assert resolved("staleness-testbed", quick=True).trainer.steps == 8  # --quick keeps its own
    own = tmp_path / "own.yaml"
    own.write_text("eval:\n  cache_initial: false\n")
    assert not resolved(str(own)).eval.cache_initial and resolved(str(own)).trainer.steps == 100


@pytest.mark.parametrize("kwargs, match", [
    ({"methods": ["nope"]}, "unknown nope"),
    ({"seeds": 0}, "seeds"),
    ({"ks": [-1]}, "K must be"),
])
def test_bad_matrix_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_cells("atlas", **kwargs)


def test_unknown_suite():
    with pytest.raises(ValueError, match="suite: must be one of a3po, .*; got 'x'"):
        build_cells("x")


def test_peer_suite_runs_trl_cell_with_its_own_runner():
    cells = build_cells("peer-trl", quick=True)
    assert [(c.method, c.runner) for c in cells] == [
        ("trl-grpo", "trl"), ("asyncrl-sync", "train"), ("asyncrl-async-loglinear", "train")]


def test_a3po_at_staleness_k_runs_async_methods_at_w_equals_k_and_logs_the_error():
    cells = build_cells("a3po", seeds=1, ks=[4, 8])
    assert [c.name for c in cells] == ["sync-s0", "async-recompute-k4-s0", "async-recompute-k8-s0",
                                       "async-loglinear-k4-s0", "async-loglinear-k8-s0"]
    ll8 = load_config(None, list(cells[-1].overrides))
    assert (ll8.async_.max_staleness, ll8.async_.max_ahead, ll8.trainer.prox) == (8, 8, "loglinear")
    assert ll8.trainer.prox_error and cells[-1].method == "async-loglinear-k8"
    assert ll8.trainer.prox_error_every == 10
    rec4 = load_config(None, list(cells[1].overrides))
    assert (rec4.async_.max_ahead, rec4.trainer.prox, rec4.trainer.prox_error) == (4, "recompute", False)
    with pytest.raises(ValueError, match="need K >= 1"):
        build_cells("a3po", ks=[0])


def test_a_newly_registered_loss_joins_the_atlas_with_the_proximal_policy_it_declares(monkeypatch):
    """The atlas reads its arms from the loss registry: registering a loss is the only edit."""
    from asyncrl.objectives import LOSSES, PROX_REQUIRED, LossEntry

    entry = LossEntry(LOSSES["decoupled"].fn, LOSSES["decoupled"].params, reads_prox=PROX_REQUIRED,
                      natural_prox="linear")
    monkeypatch.setitem(LOSSES, "my_loss", entry)
    cells = build_cells("atlas", quick=True, ks=[4])
    mine = [c for c in cells if c.method == "my_loss"]
    assert len(mine) == 1 and "trainer.prox=linear" in mine[0].overrides and "loss.name=my_loss" in mine[0].overrides
    assert mine[0].params["prox"] == "linear"


def test_a3po_floor_arm_runs_at_each_k_with_its_error_measured():
    cells = build_cells("a3po", seeds=1, methods=["sync", "async-a3po-floor"], ks=[4, 16])
    assert [c.name for c in cells] == ["sync-s0", "async-a3po-floor-k4-s0", "async-a3po-floor-k16-s0"]
    cfg = load_config(None, list(cells[2].overrides))
    assert (cfg.trainer.prox, cfg.async_.max_ahead, cfg.trainer.prox_error) == ("loglinear_floor", 16, True)


def test_scale_cells_run_world_two_under_torchrun():
    from benchmarks.bench.runner import cell_command
    from benchmarks.bench.suite_scale import train_phase_samples_per_s

    cells = {c.method: c for c in build_cells("scale", seeds=1)}
    assert list(cells) == ["sync-w1", "sync-w1-t2", "sync-w2", "async-w1", "async-w2"]
    assert cells["sync-w1"].runner == "train" and cells["sync-w2"].runner == "torchrun"
    command = cell_command(cells["async-w2"], Path("runs"))
    assert command[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    assert "run.mode=async" in command and load_config(None, list(cells["sync-w1-t2"].overrides)).policy.torch_threads == 2
    # 64 samples per 2 s step, 0.5 s of it training: 128 samples/s in the training phase
    run = {"summary": {"samples_per_s": 32.0, "time_per_step_s": 2.0, "train_time_per_step_s": 0.5}}
    assert train_phase_samples_per_s(run) == pytest.approx(128.0)
