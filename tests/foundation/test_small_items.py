"""The smaller items of a TRL user's first hour: --version, the resume line, the report's path on
stdout, summary floats without noise, run.mode=sync's objective, the TRL names table against the
installed TRL, --help-keys for other libraries' names, the live line at
80 columns and the report's training-signal curves."""

from __future__ import annotations

import dataclasses
import inspect
import io
import json
import math
import random
import re
import sys
from pathlib import Path

import pytest
import torch
from rich.console import Console

from asyncrl import __version__
from asyncrl.cli import main
from asyncrl.config.help import describe_keys, peer_matches
from asyncrl.config.peers import PEER_NAMES
from asyncrl.tracking.metrics import readable_floats
from asyncrl.core.progress import TrainProgress, fit_fields
from asyncrl.runtime.run_report import KL_PANEL, logged_panels, reward_function_keys, signal_panels, write_run_report

sys.path.insert(0, str(Path(__file__).parent))
from test_e2e_train import TINY, run_cli  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIG_MD = REPO / "docs" / "config.md"


# --version


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"asyncrl {__version__}"


# summary floats


def test_readable_floats_hand_worked():
    assert readable_floats(0.16875000000000004) == 0.16875
    assert readable_floats(0.1 + 0.2) == 0.3
    assert readable_floats(1 / 3) == 0.333333333333
    assert readable_floats({"a": [0.30000000000000004, 3, None, "x"], "b": (True, 1e-20 / 3)}) == {
        "a": [0.3, 3, None, "x"], "b": [True, 3.33333333333e-21]}
    assert readable_floats(7) == 7 and isinstance(readable_floats(7), int)
    assert math.isnan(readable_floats(math.nan))


def test_readable_floats_change_nothing_beyond_noise():
    rng = random.Random(0)
    for _ in range(2000):
        x = rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30)
        assert abs(readable_floats(x) - x) <= 5e-12 * abs(x)
        assert readable_floats(readable_floats(x)) == readable_floats(x)  # idempotent


# run.mode=sync


def test_sync_mode_defaults_train_the_sync_presets_objective():
    """At staleness 0, decoupled + loglinear prox is ppo against the behavior policy exactly."""
    from asyncrl.objectives import policy_loss
    from asyncrl.objectives.prox.loglinear import apply_loglinear, loglinear_plan

    g = torch.Generator().manual_seed(0)
    behav = -3.0 * torch.rand(4, 6, generator=g)
    logp = (behav + 0.3 * torch.randn(4, 6, generator=g)).requires_grad_()  # moved by earlier minibatches
    adv, mask = torch.randn(4, generator=g), torch.rand(4, 6, generator=g) < 0.8
    versions = torch.full((4, 6), 7)  # sync: every token from the weights being trained
    versions[:, -1] = -1  # padding
    prox = apply_loglinear(*loglinear_plan(behav, versions, 7), logp)
    decoupled, _ = policy_loss("decoupled", logp, behav, adv, mask, prox_logp=prox)
    (grad_decoupled,) = torch.autograd.grad(decoupled, logp)
    ppo, _ = policy_loss("ppo", logp, behav, adv, mask)
    (grad_ppo,) = torch.autograd.grad(ppo, logp)
    assert torch.equal(decoupled, ppo) and torch.equal(grad_decoupled, grad_ppo)


def test_the_sync_note_is_in_the_docs():
    assert "`run.mode=sync` trains `sync/decoupled`" in CONFIG_MD.read_text()


# the other libraries' names


def _docs_tables() -> dict[str, tuple[tuple[str, str], ...]]:
    text = CONFIG_MD.read_text().split("## Names in other libraries", 1)[1]
    tables = {}
    for library in PEER_NAMES:
        part = re.split(r"\n### ", text.split(f"### {library}", 1)[1])[0]
        rows = [tuple(c.strip() for c in line.strip().strip("|").split(" | ")) for line in part.splitlines()
                if line.startswith("| ") and not line.startswith(("| ---", f"| {library} |"))]
        tables[library] = tuple(rows)
    return tables


def test_peer_names_are_the_docs_tables():
    assert _docs_tables() == PEER_NAMES


def test_every_trl_name_in_the_table_is_in_the_installed_trl():
    trl = pytest.importorskip("trl")
    known = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    known |= set(inspect.signature(trl.GRPOTrainer.__init__).parameters)
    cited = {name.split("=")[0] for theirs, _ in PEER_NAMES["TRL"] for name in re.findall(r"`([^`]+)`", theirs)
             if not name.startswith('"')}
    assert {"num_generations", "loss_type", "vllm_importance_sampling_mode", "reward_funcs"} <= cited
    assert cited - known == set()
    assert "max_prompt_length" not in known  # the row that once claimed it is gone
    # TRL's importance-sampling default, as the table states it
    defaults = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}
    assert defaults["vllm_importance_sampling_mode"] == "sequence_mask"
    assert defaults["vllm_importance_sampling_clip_max"] == 3.0
    table = " ".join(theirs for theirs, _ in PEER_NAMES["TRL"])
    for loss_type in ("cispo", "sapo", "luspo", "vespo"):
        assert f'"{loss_type}"' in table


def test_help_keys_finds_other_libraries_names_and_shows_ours():
    text = describe_keys("num_generations")
    assert text.splitlines()[:2] == ["in other libraries:", "  TRL num_generations  ->  rollout.samples_per_prompt"]
    assert re.search(r"^  rollout\.samples_per_prompt\s+int = 8 ", text, re.M)
    assert [row[0] for row in peer_matches("max_head_offpolicyness")] == ["AReaL"]
    assert "async.max_staleness" in describe_keys("max_head_offpolicyness")
    assert "in other libraries" not in describe_keys("trainer.lr")  # our own keys as before
    assert describe_keys("no_such_name_anywhere") is None


def test_help_keys_cli_exit_status(capsys):
    assert main(["train", "--help-keys", "num_generations"]) == 0
    assert "rollout.samples_per_prompt" in capsys.readouterr().out
    assert main(["train", "--help-keys", "no_such_name_anywhere"]) == 2


# the live line at 80 columns

RECORD = {"reward_mean": 0.53125, "eval_reward": 0.47, "staleness_token_mean": 1.24, "staleness_token_max": 3,
          "trainer_wait_s": 0.412, "dropped_samples": 2, "step_time_s": 2.0, "throughput_tokens_per_s": 1234.5,
          "ess_frac": 0.91}


def _live_line(width: int) -> str:
    out = io.StringIO()
    progress = TrainProgress(200, "async/decoupled", console=Console(file=out, force_terminal=True, width=width),
                             batch_size=64)
    with progress:
        progress.step(12, RECORD)
        progress.progress.refresh()
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.getvalue())
    return [line for line in re.split(r"[\r\n]", text) if "12/200" in line][-1]


@pytest.mark.parametrize("width", [80, 100])
def test_step_eta_and_ess_survive_a_narrow_terminal(width):
    line = _live_line(width)
    assert len(line) <= width
    assert "12/200" in line and "ETA" in line and "ess 0.91" in line and "reward 0.531" in line
    assert "tok/s" not in line  # the least important went first


def test_fit_fields_drops_the_least_important_first_and_keeps_the_order():
    fields = [("reward", "0.531"), ("eval", "0.470"), ("stale", "1.2/3"), ("tok/s", "1,234"), ("ess", "0.91")]
    assert fit_fields(fields, 200) == fields
    assert fit_fields(fields, len("reward 0.531  ess 0.91")) == [("reward", "0.531"), ("ess", "0.91")]
    assert fit_fields(fields, 8) == [("ess", "0.91")]
    assert fit_fields(fields, 0) == []


# report.html curves


def test_report_has_the_training_signal_curves_that_were_logged(tmp_path):
    rows = [{"step": 0, "eval_reward": 0.3}]
    for s in range(1, 21):
        rows.append({"step": s, "reward_mean": 0.3, "loss": 0.1 / s, "approx_kl_k3": 1e-3, "entropy": 1.5,
                     "ess_frac": 0.9, "completion_len_mean": 12.0, "reward/correct": 0.4, "reward/fmt": 1.0,
                     "reward/errors": 0})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert reward_function_keys(rows) == ["reward/correct", "reward/fmt"]
    assert [title for title, _ in logged_panels(rows)] == [
        "Policy loss", "KL (nats per token)", "Entropy (nats per token)", "ESS fraction", "Completion length (tokens)"]
    # each KL line says KL to what: the anchor of each update follows the run's loss and trainer.prox
    kl_label = {(loss, prox): dict(logged_panels(rows, signal_panels({"loss": loss, "prox": prox})))[KL_PANEL]
                for loss, prox in (("decoupled", "loglinear"), ("ppo", "none"), ("reinforce", "loglinear"))}
    assert kl_label["decoupled", "loglinear"] == [
        ("approx_kl_k3", "per update, from π_prox (trainer.prox=loglinear) (k3)")]
    assert kl_label["ppo", "none"] == kl_label["reinforce", "loglinear"]  # no kl_ref logged: no line for it
    assert kl_label["ppo", "none"] == [("approx_kl_k3", "per update, from π_behav, the policy that sampled (k3)")]
    with_ref = [{**r, "kl_ref": 0.01} for r in rows]
    assert dict(logged_panels(with_ref, signal_panels({})))[KL_PANEL][0] == (
        "kl_ref", "to π_ref, the starting weights (trainer.kl_coef)")
    page = write_run_report(tmp_path, {}).read_text()
    # reward, reward per function, training signals, utilisation (no staleness or time split logged)
    assert page.count("data:image/png;base64,") == 4
    assert "Mean raw value of each reward function" in page and "Training signals per step" in page
    assert logged_panels([{"step": 1, "loss": math.nan}]) == [] and reward_function_keys([{"step": 1}]) == []


# a real run: the report's path on stdout, rounded summary.json, the resume line


def _significant_digits(number: str) -> int:
    mantissa = number.lower().split("e")[0].replace("-", "").replace(".", "").lstrip("0")
    return len(mantissa)


def test_stdout_names_only_a_report_written_after_the_summary(tmp_path):
    import os

    from asyncrl.cli import _report_of

    assert _report_of(str(tmp_path)) is None
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "report.html").write_text("")
    assert _report_of(str(tmp_path)) == str(tmp_path / "report.html")
    os.utime(tmp_path / "report.html", ns=(0, 0))  # a page left by an earlier attempt
    assert _report_of(str(tmp_path)) is None


def test_train_names_its_report_rounds_its_summary_and_resume_says_so(tmp_path, model_dir):
    args = ["train", *TINY, f"policy.model_path={model_dir}", "run.name=small", "trainer.steps=2",
            "run.checkpoint_every=1", "eval.every=1"]
    first = run_cli(tmp_path, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "runs" / "small"
    out = json.loads(first.stdout.strip().splitlines()[-1])
    assert out["report"] == str(Path(out["run_dir"]) / "report.html")  # as run_dir is: relative to the cwd
    assert (tmp_path / out["report"]).resolve() == (run_dir / "report.html").resolve()
    assert (run_dir / "report.html").is_file()
    assert "resuming" not in first.stderr
    text = (run_dir / "summary.json").read_text()
    floats = re.findall(r"-?\d+\.\d+(?:[eE][-+]?\d+)?", text)
    assert floats and max(map(_significant_digits, floats)) <= 12
    again = run_cli(tmp_path, "train", "--resume", str(run_dir), "trainer.steps=3")
    assert again.returncode == 0, again.stderr[-3000:]
    said = [line for line in again.stderr.splitlines() if "resuming" in line]
    assert len(said) == 1 and said[0].startswith("asyncrl: resuming from step 2 of 3 (")
