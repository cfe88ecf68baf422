import subprocess
import sys

import pytest

from asyncrl.config import Config, ConfigError, load_config
from asyncrl.runtime.validate import load_run_config


def test_defaults_validate():
    cfg = load_config()
    assert isinstance(cfg, Config)
    assert cfg.trainer.n_minibatches == 4


def test_dotted_overrides_and_types():
    cfg = load_config(None, ["trainer.lr=0.001", "rollout.temperature=1", "run.name=abc",
                             "task.arithmetic.max_steps=2", "loss.params.eps_high=0.28"])
    assert cfg.trainer.lr == 0.001
    assert isinstance(cfg.rollout.temperature, float)
    assert cfg.task.arithmetic.max_steps == 2
    assert cfg.loss.params == {"eps_high": 0.28}


def test_scientific_notation_floats(tmp_path):
    assert load_config(None, ["trainer.lr=1e-4"]).trainer.lr == 1e-4
    path = tmp_path / "c.yaml"
    path.write_text("trainer:\n  lr: 3e-5\n")
    assert load_config(path).trainer.lr == 3e-5
    with pytest.raises(ConfigError, match="trainer.steps"):
        load_config(None, ["trainer.steps=1e3"])


def test_yaml_file_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("trainer:\n  steps: 7\n  lr: 0.01\n")
    cfg = load_config(path, ["trainer.steps=9"])
    assert (cfg.trainer.steps, cfg.trainer.lr) == (9, 0.01)


def test_name_shorthand():
    assert load_config(None, ["task=arithmetic"]).task.name == "arithmetic"


@pytest.mark.parametrize("override, key", [
    ("trainer.nope=1", "trainer.nope"),
    ("nope.x=1", "nope"),
    ("trainer.steps=abc", "trainer.steps"),
    ("trainer.steps=1.5", "trainer.steps"),
    ("trainer.lr=-1", "trainer.lr"),
    ("trainer.n_minibatches=0", "trainer.n_minibatches"),
    ("trainer.n_minibatches=5", "trainer.n_minibatches"),
    ("trainer.prox=sometimes", "trainer.prox"),
    ("rollout.temperature=0", "rollout.temperature"),
    ("run.tensorboard=maybe", "run.tensorboard"),
    ("loss.name=nonsense", "loss.name"),
    ("loss.params.bogus=1", "loss.params.bogus"),
    ("task.arithmetic.max_steps=0", "task.arithmetic"),
    ("policy.model_path=/does/not/exist", "policy.model_path"),
])
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ConfigError) as info:
        load_run_config(None, [override])  # the loss's and the proximal strategy's names: the run's checks
    message = str(info.value)
    assert key in message
    assert "\n" not in message


def test_bad_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("trainer:\n  steps: [1,\n")
    with pytest.raises(ConfigError, match="bad.yaml:"):
        load_config(path)


def test_missing_file():
    with pytest.raises(ConfigError, match="no such file"):
        load_config("/nonexistent.yaml")


def test_cli_config_error_is_one_line_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", "trainer.stepz=3"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "trainer.stepz" in lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()  # nothing half-written
