"""Model-written code cannot get out of the ``python`` tool's sandbox: the escape probes of
``sandbox_probes.py`` (write outside its scratch, edit the user's reward module, signal the trainer,
outlive the call, reach the host's network, read the trainer's environment or memory, keep files
between calls, fork without bound) all fail from inside, run as the suite's user and, when that is
root, as an unprivileged one too."""

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from asyncrl.agents.sandbox import sandbox_problem

PROBES = Path(__file__).with_name("sandbox_probes.py")
REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534


pytestmark = pytest.mark.skipif(sandbox_problem() is not None,
                                reason=f"bubblewrap cannot start here: {sandbox_problem()}")


def _run_probes(command: list[str], workdir: Path, env: dict[str, str]) -> dict[str, str]:
    workdir.chmod(0o777)
    env = {**env, "ASYNCRL_PROBE_SECRET": "secret-" + secrets.token_hex(8)}
    done = subprocess.run([*command, str(PROBES), str(workdir)], env=env, capture_output=True, text=True,
                          timeout=240, cwd="/")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_all_held(verdicts: dict[str, str]) -> None:
    assert len(verdicts) == 9
    assert {name: v for name, v in verdicts.items() if v != "held"} == {}


def test_probes_fail_from_inside_as_this_user(tmp_path):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO / "src")}
    _assert_all_held(_run_probes([sys.executable], tmp_path, env))


def _unprivileged_python() -> tuple[str | None, str]:
    """An interpreter the unprivileged user can run with this environment's packages, or why not."""
    if os.geteuid() != 0:
        return None, "the suite runs unprivileged: the test above is that case"
    system = Path("/usr/bin/python3")
    if not system.exists() or not os.access("/usr/bin/setpriv", os.X_OK):
        return None, "needs /usr/bin/python3 and setpriv"
    version = subprocess.run([str(system), "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
    if version != str(sys.version_info[:2]):
        return None, f"/usr/bin/python3 is {version}, not this environment's {sys.version_info[:2]}"
    probe = subprocess.run(["/usr/bin/setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                            "test", "-r", str(PROBES)], capture_output=True)
    if probe.returncode != 0:
        return None, f"the checkout ({REPO}) is not readable by uid {NOBODY}"
    return str(system), ""


def test_probes_fail_from_inside_as_an_unprivileged_user(tmp_path_factory):
    python, why = _unprivileged_python()
    if python is None:
        pytest.skip(why)
    workdir = Path("/tmp") / f"asyncrl-probes-{secrets.token_hex(4)}"  # pytest's own tmp is root's alone
    workdir.mkdir()
    try:
        site = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO / 'src'}:{site}"}
        command = ["/usr/bin/setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python]
        _assert_all_held(_run_probes(command, workdir, env))
    finally:
        subprocess.run(["rm", "-rf", str(workdir)], check=False)
