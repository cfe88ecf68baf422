"""The warm start's cache directory (asyncrl.core.cache) when it cannot be one: ``$ASYNCRL_CACHE`` (or
``policy.cache_dir``) naming a file, or a directory that cannot be written, is one line naming the
path and the setting, exit 2, before the warm start; a read-only cache that already holds the warm
start still serves it; the step-0 evaluation cache only warns. The table rows ``cache-dir-a-file``
and ``cache-dir-unwritable`` (tests/foundation/test_bad_input.py) cover ``policy.cache_dir``."""

from __future__ import annotations

import errno
import json

import pytest

from asyncrl.config import load_config
from asyncrl.core import cache
from asyncrl.core.loader import ConfigError
from cli_forks import shared_forks


def test_asyncrl_cache_naming_a_file_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("")
    for value, where in ((tmp_path / "afile", "is a file"),
                         (tmp_path / "afile" / "sub", f"lies under {tmp_path}/afile, a file")):
        proc = shared_forks().run(["train", "run.tensorboard=false", "trainer.steps=1"], tmp_path,
                                  {"ASYNCRL_CACHE": str(value), "HF_HUB_OFFLINE": "1"})
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr == (f"asyncrl: config error: policy.cache_dir: the cache directory {value} ($ASYNCRL_CACHE) "
                               f"{where}, not a directory; set ASYNCRL_CACHE or policy.cache_dir to a writable "
                               "directory\n")
        assert not (tmp_path / "runs").exists()


def _read_only(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(cache.tempfile, "mkdtemp", refuse)


def test_a_read_only_cache_is_one_line_naming_it_and_its_setting(tmp_path, monkeypatch):
    from asyncrl.training.pretrain import warm_start

    monkeypatch.setenv("ASYNCRL_CACHE", str(tmp_path / "ro"))
    _read_only(monkeypatch)
    with pytest.raises(ConfigError, match=rf"^config error: policy.cache_dir: cannot write the cache directory "
                                          rf"{tmp_path}/ro \(\$ASYNCRL_CACHE\): Read-only file system; set "
                                          r"ASYNCRL_CACHE or policy.cache_dir to a writable directory$"):
        warm_start(load_config(None, ["pretrain.steps=1"]))
    with pytest.raises(ConfigError, match=rf"cannot write the cache directory {tmp_path}/mine \(policy.cache_dir\)"):
        warm_start(load_config(None, ["pretrain.steps=1", f"policy.cache_dir={tmp_path / 'mine'}"]))


def test_a_read_only_cache_holding_the_warm_start_serves_it(tmp_path, monkeypatch):
    from asyncrl.training.pretrain import pretrained_dir, warm_start

    cfg = load_config(None, [f"policy.cache_dir={tmp_path / 'shared'}"])
    built = pretrained_dir(cfg)
    built.mkdir(parents=True)
    (built / "pretrain_summary.json").write_text("{}")  # complete: nothing is written to use it
    _read_only(monkeypatch)
    assert warm_start(cfg) == built


def test_the_step_0_evaluation_cache_only_warns(tmp_path, capsys):
    from asyncrl.runtime import eval_cache

    (tmp_path / "afile").write_text("")
    cfg = load_config(None, [f"policy.cache_dir={tmp_path / 'afile'}"])
    assert eval_cache.cache_path(cfg, "k") is None
    eval_cache.store(None, {"eval_reward": 1.0})
    assert "asyncrl: warning: eval.cache_initial: the step-0 evaluation is not cached (policy.cache_dir: the cache " \
           f"directory {tmp_path}/afile (policy.cache_dir) is a file" in capsys.readouterr().err
    path = tmp_path / "cache" / "initial-eval" / "k.json"
    eval_cache.store(path, {"eval_reward": 1.0})
    assert json.loads(path.read_text()) == {"eval_reward": 1.0}
