"""results.json says which code and which packages produced a study."""

import subprocess
from pathlib import Path

from benchmarks.bench import runner


def test_host_info_records_the_commit_the_tree_state_and_package_versions():
    info = runner.host_info()
    src = Path(runner.__file__).resolve().parent
    head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert info["commit"] == head.stdout.strip()
        assert isinstance(info["dirty"], bool)
    else:  # an installed copy: unknown, not guessed
        assert info["commit"] is None and info["dirty"] is None
    assert info["packages"]["transformers"]
    assert "torch" in info and "python" in info


def test_no_git_means_unknown_not_latest(monkeypatch):
    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert runner.source_revision() == {"commit": None, "dirty": None}
