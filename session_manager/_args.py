"""Argument parsing shared by the ``session-manager`` commands: one-line
argument errors (exit 2, no usage dump, no traceback) and the environment
variables ``--help`` lists."""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

ENVIRONMENT = (
    ("III_URL", "engine WebSocket URL when --url is not given"),
    ("SESSION_MANAGER_LOG", "log level when --log-level is not given (DEBUG, INFO, WARNING, ERROR)"),
    ("III_COMPOSE_DIR", "base of a relative adapter.config.data_dir (set by iii Compose)"),
    ("III_NAMESPACE", "worker namespace on the engine (iii SDK; set by iii Compose)"),
    ("III_TOKEN", "bearer token for the engine connection (iii SDK)"),
    ("III_WORKER_NAME", "overrides the registered worker name (iii SDK; Compose expects session-manager)"),
    ("III_ENGINE_WS_URL", "test suite only: the engine the @engine scenarios use"),
    ("III_STANDIN_DIR", "test suite only: where the iii stand-in engine lives"),
    ("SESSION_MANAGER_REFERENCE", "test suite only: the reference material (default ../shared/reference)"),
    ("SESSION_MANAGER_TEST_POSTGRES", "test suite only: the PostgreSQL server the postgres tests use"),
    ("SESSION_MANAGER_CHROMIUM", "test suite only: the Chromium the viewer's browser tests drive "
                                 "(default /usr/bin/chromium)"),
    ("SESSION_MANAGER_ARTIFACTS", "test suite only: where the browser tests save screenshots"),
)


def environment_epilog() -> str:
    width = max(len(name) for name, _ in ENVIRONMENT)
    lines = [f"  {name.ljust(width)}  {what}" for name, what in ENVIRONMENT]
    return "environment variables:\n" + "\n".join(lines)


class OneLineParser(argparse.ArgumentParser):
    """An argument error is one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(2)


def suggest(word: str, choices: Sequence[str]) -> str | None:
    """The choice ``word`` most likely meant (a typo, a missing prefix), or ``None``."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return close[0] if close else None


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(value: str) -> str:
    """An argparse ``type``: a logging level name, case-insensitive."""
    name = value.strip().upper()
    if name not in LOG_LEVELS or not isinstance(logging.getLevelName(name), int):
        raise argparse.ArgumentTypeError(f"invalid log level {value!r} (choose from {', '.join(LOG_LEVELS)})")
    return name
