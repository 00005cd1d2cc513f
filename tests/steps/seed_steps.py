"""Steps of the @engine seed scenarios: the real ``session-manager`` process
booting with a ``--config`` seed on a fresh stand-in engine (nothing stored
there yet, so the seed is what the worker would start from). Skips when no
stand-in is available."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_bdd import given, parsers, then, when

from tests.steps.bridge_steps import _standin
from tests.steps.engine_steps import CALL_TIMEOUT_MS, connected, new_client, shutdown


class FreshEngine:
    """A stand-in of its own, a seed file, and the worker process's outcome."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.stack = contextlib.ExitStack()
        self.url = ""
        self.seed = tmp / "seed.yaml"
        self.returncode: int | None = None
        self.log = ""

    def start(self) -> None:
        running = _standin()
        self.url = self.stack.enter_context(running()).url

    def run_worker(self) -> None:
        env = {**os.environ, "OTEL_ENABLED": "false"}
        env.pop("SM_SEED_TIMEOUT", None)  # the placeholder's default is what the worker sees
        done = subprocess.run([sys.executable, "-m", "session_manager", "--url", self.url, "--config",
                               str(self.seed)], capture_output=True, env=env, timeout=60, check=False)
        self.returncode, self.log = done.returncode, done.stderr.decode("utf-8", "replace")

    def stored(self) -> Any:
        from iii import InvocationError

        client = new_client(self.url, "seed-tests-reader")
        try:
            connected(client)
            try:
                return client.trigger({"function_id": "configuration::get", "payload": {"id": "session-manager"},
                                       "timeout_ms": CALL_TIMEOUT_MS})
            except InvocationError as e:
                return e.code
        finally:
            shutdown(client)


@pytest.fixture
def fresh_engine(tmp_path: Path) -> Iterator[FreshEngine]:
    engine = FreshEngine(tmp_path)
    try:
        yield engine
    finally:
        engine.stack.close()


@given("a fresh engine with nothing stored for the session-manager configuration")
def _fresh(fresh_engine: FreshEngine) -> None:
    fresh_engine.start()
    assert fresh_engine.stored() == "NOT_FOUND"


@given("the seed file holds:")
def _seed_file(fresh_engine: FreshEngine, docstring: str) -> None:
    fresh_engine.seed.write_text(docstring + "\n", encoding="utf-8")


@when("the session-manager process boots on that engine with the seed")
def _boot(fresh_engine: FreshEngine) -> None:
    fresh_engine.run_worker()


@then(parsers.parse('it exits with a non-zero status, logging "{text}" and the seed\'s path'))
def _refused(fresh_engine: FreshEngine, text: str) -> None:
    assert fresh_engine.returncode not in (None, 0), fresh_engine.log
    assert text in fresh_engine.log, fresh_engine.log
    assert str(fresh_engine.seed) in fresh_engine.log, fresh_engine.log


@then("nothing is stored for the session-manager configuration on that engine")
def _nothing_stored(fresh_engine: FreshEngine) -> None:
    assert fresh_engine.stored() == "NOT_FOUND"
