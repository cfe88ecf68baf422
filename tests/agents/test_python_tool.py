"""asyncrl.agents.python_tool: the limits, scratch directory, environment and network, in the
bubblewrap sandbox and unsandboxed (``sandbox="none"``) under whichever no-network mechanism this
machine allows (and the socket patch, forced). The escape probes are tests/security/."""

import dataclasses
import os
import socket
import time

import pytest

import asyncrl.agents.python_tool as python_tool_module
from asyncrl.agents.python_tool import PythonLimits, network_isolation, python, python_tool, run_python
from asyncrl.agents.sandbox import SandboxUnavailable, sandbox_problem
from asyncrl.agents.tools import ToolBox, ToolCall


SANDBOX_PROBLEM = sandbox_problem()
pytestmark = [pytest.mark.skipif(not hasattr(os, "killpg"), reason="the python tool needs POSIX"),
              pytest.mark.skipif(SANDBOX_PROBLEM is not None, reason=f"no sandbox here: {SANDBOX_PROBLEM}")]

FAST = PythonLimits(cpu_s=1, memory_mb=256, wall_s=5, output_chars=4000)
UNSANDBOXED = dataclasses.replace(FAST, sandbox="none")


@pytest.fixture(params=["bubblewrap", "detected", "socket-patch"])
def isolation(request, monkeypatch) -> str:
    """Each network test three times: in the sandbox; unsandboxed with the mechanism this machine
    has, and with the fallback forced."""
    if request.param == "bubblewrap":
        return "bubblewrap"
    if request.param == "socket-patch":
        monkeypatch.setattr(python_tool_module, "_ISOLATION", "socket-patch")
    return network_isolation()


@pytest.fixture()
def listener():
    """A TCP server on the host's loopback that accepts: the sandbox must not reach it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.listen(1)
    yield server.getsockname()[1]
    server.close()


def test_prints_output():
    assert run_python("print(6 * 7)\nprint('done')", FAST) == "42\ndone\n"
    assert run_python("x = 1", FAST) == "(no output)"


def test_errors_are_output_with_the_exit_status():
    out = run_python("print('before')\n1 / 0", FAST)
    assert out.startswith("before\nTraceback (most recent call last):\n  File \"<code>\", line 2, in <module>\n")
    assert out.endswith("ZeroDivisionError: division by zero\n[exit status 1]")
    assert run_python("import sys; sys.exit(3)", FAST) == "[exit status 3]"
    assert run_python("import numpy", FAST).endswith("ModuleNotFoundError: No module named 'numpy'\n[exit status 1]")


def test_cpu_time_limit_kills_a_busy_loop():
    t0 = time.monotonic()
    out = run_python("print('start')\nwhile True: pass", FAST)
    assert out == "start\n[killed: CPU time limit (1 s)]"
    assert time.monotonic() - t0 < 4


def test_wall_clock_limit_kills_a_sleeper():
    t0 = time.monotonic()
    out = run_python("import time\nprint('zz')\ntime.sleep(30)", PythonLimits(wall_s=1))
    assert out == "zz\n[killed: wall-clock limit (1 s)]"
    assert time.monotonic() - t0 < 3


def test_memory_limit():
    out = run_python("b = bytearray(2 * 1024 ** 3)\nprint('allocated')", FAST)
    assert "allocated" not in out and out.endswith("MemoryError\n[exit status 1]")


def test_file_size_limit():
    out = run_python("open('big', 'wb').write(b'0' * (32 * 2 ** 20))", FAST)
    assert out.endswith("OSError: [Errno 27] File too large\n[exit status 1]")


def test_output_cut_keeps_start_and_end():
    out = run_python("print('a' * 100_000)\nprint('the end')", PythonLimits(output_chars=100))
    head, _, tail = out.partition("\n…[output cut: about ")
    assert head == "a" * 50 and tail.endswith("]…\n" + ("a" * 100_000 + "\nthe end\n")[-50:])


def test_output_flood_stays_bounded():
    out = run_python("while True: print('x' * 1000)", FAST)
    assert len(out) < 4200 and out.endswith("[killed: CPU time limit (1 s)]")


NOTE = ("import os\nopen('note.txt', 'w').write('hi')\nprint(os.getcwd())\nprint(os.listdir('.'))\n"
        "print(os.environ['HOME'] == os.getcwd())")


def test_scratch_dir_is_the_cwd_and_is_removed():
    cwd, listing, home = run_python(NOTE, UNSANDBOXED).splitlines()
    assert os.path.basename(cwd).startswith("asyncrl-python-") and listing == "['note.txt']" and home == "True"
    assert not os.path.exists(cwd)


def test_sandbox_scratch_is_a_fresh_tmp_per_call():
    assert run_python(NOTE, FAST) == "/tmp\n['note.txt']\nTrue\n"
    assert run_python("import os\nprint(os.listdir('.'))", FAST) == "[]\n"


@pytest.mark.parametrize("limits, names", [(FAST, "['HOME', 'LANG', 'PATH', 'PWD', 'TMPDIR']"),  # bwrap sets PWD
                                           (UNSANDBOXED, "['HOME', 'LANG', 'PATH', 'TMPDIR']")], ids=["bubblewrap", "none"])
def test_parent_environment_not_visible(monkeypatch, limits, names):
    monkeypatch.setenv("ASYNCRL_TEST_SECRET", "hunter2")
    out = run_python("import os\nprint(sorted(os.environ))\nprint(os.environ.get('ASYNCRL_TEST_SECRET'))", limits)
    assert out == names + "\nNone\n"


def test_stdin_is_empty():
    assert run_python("import sys\nprint(repr(sys.stdin.read()))", FAST) == "''\n"


def test_network_refused(isolation, listener):
    with socket.create_connection(("127.0.0.1", listener), timeout=2):  # reachable from here
        pass
    out = run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {listener}), timeout=2)\n"
                     "print('connected')", FAST if isolation == "bubblewrap" else UNSANDBOXED)
    assert "connected" not in out and out.endswith("[exit status 1]")
    if isolation == "bubblewrap":  # its own loopback, where nothing listens
        assert "ConnectionRefusedError" in out
    elif isolation == "namespace":
        assert "OSError: [Errno 101] Network is unreachable" in out
    else:
        assert "PermissionError: [Errno 13] network access is disabled in this sandbox" in out


def test_socket_patch_blocks_the_usual_ways(monkeypatch):
    monkeypatch.setattr(python_tool_module, "_ISOLATION", "socket-patch")
    for code in ("import socket; socket.socket()", "import _socket; _socket.socket()",
                 "import socket; socket.getaddrinfo('localhost', 80)", "import socket; socket.socketpair()"):
        assert "network access is disabled in this sandbox" in run_python(code, UNSANDBOXED), code


def test_tool_through_the_toolbox():
    tool = python_tool(FAST)
    assert tool.name == "python" and tool.timeout_s == FAST.wall_s + 5
    assert tool.schema["function"]["parameters"]["required"] == ["code"]
    box = ToolBox([tool])
    result = box.call(ToolCall("python", {"code": "print(sum(range(10)))"}))
    assert (result.content, result.failed) == ("45\n", False)
    # the limits are the factory's: the model cannot pass its own
    result = box.call(ToolCall("python", {"code": "print(1)", "limits": {"cpu_s": 1000}}))
    assert result.reason == "bad_arguments"


@pytest.mark.parametrize("code, last_line", [("raise ValueError('no')", "[exit status 1]"),
                                             ("import sys; sys.exit(3)", "[exit status 3]"),
                                             ("while True: pass", "[killed: CPU time limit (1 s)]")])
def test_a_call_that_did_not_exit_cleanly_is_failed(code, last_line):
    """A reward that pays for calls that did not fail must not pay for a crash: the observation is
    the code's own output, and the call is failed."""
    result = ToolBox([python_tool(FAST)]).call(ToolCall("python", {"code": code}))
    assert result.failed and result.reason == "raised" and result.content.endswith(last_line)


def test_unknown_sandbox_is_refused():
    with pytest.raises(ValueError, match="python_sandbox: 'docker' is not one of bubblewrap, none"):
        PythonLimits(sandbox="docker")


def test_refused_in_one_line_where_the_sandbox_cannot_start(monkeypatch):
    def no_sandbox(spec=None):
        raise SandboxUnavailable("bwrap failed: No permissions to create new namespace")

    monkeypatch.setattr(python_tool_module, "check_sandbox", no_sandbox)
    with pytest.raises(ValueError) as err:
        python_tool(FAST)
    message = str(err.value)
    assert "\n" not in message and "No permissions to create new namespace" in message
    assert "env.python_sandbox=none" in message
    python_tool(UNSANDBOXED)  # the opt-in needs no sandbox


def test_default_python_function():
    assert python("print('hi')") == "hi\n"
    with pytest.raises(ValueError, match="limit is 100000"):
        python("#" * 100_001)


def test_config_names_the_opt_in_where_the_sandbox_cannot_start(monkeypatch):
    from asyncrl.runtime.validate import load_run_config

    def no_sandbox(spec=None):
        raise SandboxUnavailable("bwrap failed: setting up uid map: Permission denied")

    monkeypatch.setattr(python_tool_module, "check_sandbox", no_sandbox)
    with pytest.raises(ValueError, match=r"tools\[0\]: python: the sandbox .* Permission denied.*env.python_sandbox=none"):
        load_run_config(None, ["env.tools=[python]"])
    unsandboxed = load_run_config(None, ["env.tools=[python]", "env.python_sandbox=none", "env.tool_schemas=none"])
    assert unsandboxed.env.python_sandbox == "none"
