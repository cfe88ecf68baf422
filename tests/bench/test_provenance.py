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
    # the processor: the same seed's warm start differed between an AMD and an Intel machine
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), None) if Path("/proc/cpuinfo").exists() else None
    if model:
        assert info["cpu_model"] == model


def test_no_git_means_unknown_not_latest(monkeypatch):
    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert runner.source_revision() == {"commit": None, "dirty": None}
