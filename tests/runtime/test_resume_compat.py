"""Resuming a run saved before a config key existed: the key compares at its default."""

import pytest
import yaml

from asyncrl.config import ConfigError, load_config
from asyncrl.runtime.resume import check_compatible


def _save(run_dir, data):
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(data))


def test_a_key_missing_from_the_saved_config_compares_at_its_default(tmp_path):
    saved = load_config().to_dict()
    del saved["trainer"]["lr_schedule"]  # as written by a version without LR schedules
    _save(tmp_path / "run", saved)
    check_compatible(load_config(), tmp_path / "run")


def test_a_changed_key_is_still_refused(tmp_path):
    _save(tmp_path / "run", load_config().to_dict())
    with pytest.raises(ConfigError, match="trainer.lr_schedule"):
        check_compatible(load_config(overrides=["trainer.lr_schedule=cosine"]), tmp_path / "run")


def test_a_missing_saved_config_is_one_line(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(ConfigError, match="no such file"):
        check_compatible(load_config(), tmp_path / "run")
