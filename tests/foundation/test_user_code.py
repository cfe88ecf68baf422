"""The one way user code is called and named (asyncrl.core.user_code) and the one resolver of import
paths (asyncrl.core.import_path), with hand-worked cases; and no private copy of the one-line helper."""

import re
import threading
import time
from pathlib import Path

import pytest

from asyncrl.core.import_path import resolve
from asyncrl.core.user_code import Exited, TimedOut, call_guarded, finite_number, first_line, in_thread

SRC = Path(__file__).resolve().parents[2] / "src" / "asyncrl"


def test_first_line_of_a_multi_line_error_is_its_type_and_first_line():
    err = ValueError("\n  bad value 3\nTraceback (most recent call last):\n  ...")
    assert first_line(err) == "ValueError: bad value 3"


def test_first_line_of_an_error_with_an_empty_message_is_its_type():
    assert first_line(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert first_line(RuntimeError("   \n")) == "RuntimeError"


def test_first_line_cuts_to_the_limit_and_takes_text_too():
    assert first_line(OSError("x" * 500), 10) == "OSError: " + "x" * 10
    assert first_line("one\ntwo") == "one"


def test_first_line_of_an_error_whose_str_fails_is_its_type():
    class Broken(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert first_line(Broken()) == "Broken"


def test_finite_number():
    assert finite_number(True) == 1.0 and finite_number(2) == 2.0
    assert finite_number(float("nan")) is None and finite_number(float("inf")) is None
    assert finite_number("1.0") is None and finite_number(None) is None


def _spin(seconds: float) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # pure Python: the deadline stops it at its next instruction
        pass
    return "finished"


def test_a_timeout_fires_in_the_main_thread():
    started = time.monotonic()
    with pytest.raises(TimedOut):
        call_guarded(lambda: _spin(5.0), 0.2)
    assert time.monotonic() - started < 2.0


def test_a_timeout_that_a_function_catches_with_except_exception_still_fires():
    def stubborn():
        try:
            time.sleep(5.0)
        except Exception:  # noqa: BLE001 - what user code does; TimedOut is not an Exception
            return "swallowed"

    with pytest.raises(TimedOut):
        call_guarded(stubborn, 0.2)


def test_a_timeout_fires_in_another_thread_and_stops_the_call():
    stopped = threading.Event()

    def spin():
        try:
            _spin(5.0)
        except TimedOut:
            stopped.set()
            raise

    future = in_thread(spin, (), 0.2)
    err = future.exception(timeout=3.0)
    assert isinstance(err, TimedOut) and stopped.is_set()


def test_a_call_within_its_limit_returns_and_no_late_timeout_follows():
    assert call_guarded(lambda: 7, 0.2) == 7
    time.sleep(0.4)  # a late deadline would raise here
    assert in_thread(lambda: 8, (), 0.2).result(timeout=3.0) == 8


def test_sys_exit_in_a_call_is_named_not_obeyed():
    with pytest.raises(Exited, match=r"^exited \(SystemExit 3\)$"):
        call_guarded(lambda: exec("raise SystemExit(3)"), None)


def test_resolver_names_the_key_for_a_missing_module():
    with pytest.raises(ValueError) as info:
        resolve("no_such_module_qq:f", "reward.funcs[0]")
    assert str(info.value).startswith("reward.funcs[0]: cannot import 'no_such_module_qq:f': ModuleNotFoundError: "
                                      "No module named 'no_such_module_qq' (a module must be importable")


def test_resolver_names_the_key_for_a_missing_attribute():
    with pytest.raises(ValueError) as info:
        resolve("json:no_such_fn", "env.harness")
    assert str(info.value) == "env.harness: cannot import 'json:no_such_fn': json has no attribute 'no_such_fn'"


def test_resolver_reads_a_file_path_and_names_the_key_for_a_missing_file(tmp_path):
    (tmp_path / "mine.py").write_text("def f(c):\n    return c\n")
    assert resolve(f"{tmp_path / 'mine.py'}:f")([1]) == [1]
    missing = tmp_path / "gone.py"
    with pytest.raises(ValueError) as info:
        resolve(f"{missing}:f", "env.tools[0]")
    assert str(info.value) == f"env.tools[0]: cannot import '{missing}:f': ImportError: no such file: {missing}"


def test_resolver_refuses_a_non_callable_and_a_malformed_path():
    with pytest.raises(ValueError, match=r"^env.factory: 'json:__doc__' is not callable \(a str\)$"):
        resolve("json:__doc__", "env.factory", need_callable=True)
    with pytest.raises(ValueError, match=r"^reward.funcs\[1\]: 'json' is not 'pkg.module:function'"):
        resolve("json", "reward.funcs[1]")


def test_no_private_first_line_helper_outside_user_code():
    allowed = SRC / "core" / "user_code.py"
    found = [f"{path.relative_to(SRC)}:{n}" for path in sorted(SRC.rglob("*.py")) if path != allowed
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.match(r"\s*def _?first_line\b", line)]
    assert not found, f"use asyncrl.core.user_code.first_line instead of: {', '.join(found)}"
