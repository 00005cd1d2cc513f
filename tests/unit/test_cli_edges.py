"""The command line's edges: argument errors are one line and exit 2, never a
traceback; ``--help`` names every environment variable the worker reads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from session_manager._args import ENVIRONMENT


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "session_manager", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.parametrize(("args", "env", "named"), [
    (["--log-level", "bogus"], {}, "bogus"),
    ([], {"SESSION_MANAGER_LOG": "loud"}, "loud"),
    (["--no-such-flag"], {}, "--no-such-flag"),
    (["data", "frobnicate"], {}, "frobnicate"),
    (["data", "show"], {}, "SESSION"),
])
def test_argument_errors_are_one_line_and_exit_2(args: list[str], env: dict[str, str], named: str) -> None:
    # Prevents: a traceback (or a usage dump) for a typo, and a worker that starts on a bad level.
    out = run(*args, env=env)
    assert out.returncode == 2, out
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and named in lines[0], out.stderr
    assert "Traceback" not in out.stderr


def test_help_lists_the_environment_variables() -> None:
    # Prevents: configuration knobs that exist only in the source.
    out = run("--help")
    assert out.returncode == 0
    for name in ("III_URL", "SESSION_MANAGER_LOG", "III_COMPOSE_DIR", "III_ENGINE_WS_URL"):
        assert name in out.stdout
    assert all(name in out.stdout for name, _ in ENVIRONMENT)
    assert "session-manager data" in out.stdout


def test_log_level_is_case_insensitive_and_valid_levels_pass() -> None:
    # Prevents: the level check refusing what logging accepts (e.g. "debug").
    from session_manager._worker.main import parse_args

    assert parse_args(["--log-level", "debug"]).log_level == "DEBUG"
    assert parse_args(["--log-level", "Warning"]).log_level == "WARNING"
