"""Issue 25 item 11: while the engine is down the worker logs one line per state change (down,
back), not a line every ~10 s plus two iii-sdk warnings (client, telemetry) per retry."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from session_manager._worker import main as cli


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_engine_unreachable_at_boot_logs_one_line_not_one_per_retry(tmp_path: Path) -> None:
    # Prevents: a worker waiting for its engine logging "waiting ..." every 10 s plus the SDK's
    # "Connection failed" and "OTel WS disconnected" warnings on every retry.
    url = f"ws://127.0.0.1:{_closed_port()}"
    env = {k: v for k, v in os.environ.items() if k not in ("III_URL", "SESSION_MANAGER_LOG")}
    proc = subprocess.Popen([sys.executable, "-m", "session_manager", "--url", url], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Also: a SIGTERM sent at a fixed time after the spawn reached a worker on a loaded box still
    # importing, before its handler was installed (exit -15). The "waiting" line comes after it.
    assert proc.stderr is not None
    early: list[str] = []
    try:
        for line in proc.stderr:
            early.append(line)
            if "waiting for the iii engine" in line:
                break
        time.sleep(5)  # the SDK retries several times in this span (0.7 s, 1.4 s, 2.8 s, ...)
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, rest = proc.communicate(timeout=60)
    err = "".join(early) + rest
    assert proc.returncode == 0, err
    lines = err.splitlines()
    waiting = [ln for ln in lines if "waiting for the iii engine" in ln]
    assert len(waiting) == 1, err
    assert [ln for ln in lines if " WARNING " in ln or " ERROR " in ln] == waiting, err
    assert any("SIGTERM received" in ln for ln in lines) and lines[-1].endswith("session-manager stopped")


class _States:
    """A client whose connection-state listener the test drives."""

    def __init__(self) -> None:
        self.listeners: list[Callable[[str], None]] = []

    def add_connection_state_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def emit(self, *states: str) -> None:
        for state in states:
            for listener in list(self.listeners):
                listener(state)


class _Host:
    """What a reconnect re-reads: counted, not served."""

    def __init__(self) -> None:
        self.reloads = 0

        class Reloader:
            def reload(inner) -> None:
                self.reloads += 1

        self.reloader = Reloader()


def test_engine_down_while_serving_logs_one_line_down_and_one_back(caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: an outage logged on every step the SDK reports while it retries (disconnected,
    # reconnecting, disconnected, ...) instead of once when it goes down and once when it is back.
    client, host = _States(), _Host()
    caplog.set_level(logging.INFO, logger="session_manager")
    off = cli._watch_reconnects(client, "ws://engine", host)  # type: ignore[arg-type]
    client.emit("disconnected", "reconnecting", "disconnected", "reconnecting", "reconnecting", "connected",
                "connected")
    off()
    client.emit("disconnected")  # no longer watched
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "session_manager"]
    assert said == [("WARNING", "connection to ws://engine lost (disconnected); retrying"),
                    ("INFO", "reconnected to ws://engine")]
    for _ in range(100):  # the configuration re-read runs on a thread of its own
        if host.reloads:
            break
        time.sleep(0.05)
    assert host.reloads == 1


@pytest.mark.parametrize(("connected", "level", "shown"), [(False, logging.INFO, False), (False, logging.DEBUG, True),
                                                           (True, logging.INFO, True)])
def test_sdk_retry_warnings_are_debug_while_the_engine_is_down(connected: bool, level: int, shown: bool) -> None:
    # Prevents: the SDK's per-retry warnings reaching the log while our own line already says the
    # engine is down; with the engine up, an SDK warning still passes as it is.
    quiet = cli.QuietWhileDown(lambda: connected)
    logger = logging.getLogger("iii.telemetry_exporters")
    before = logger.level
    logger.setLevel(level)
    try:
        record: Any = logging.LogRecord(logger.name, logging.WARNING, __file__, 1, "retrying in %.1fs", (0.7,), None)
        assert quiet.filter(record) is shown
        assert record.levelno == (logging.WARNING if connected else logging.DEBUG)
        error = logging.LogRecord(logger.name, logging.ERROR, __file__, 1, "broken", None, None)
        assert quiet.filter(error) and error.levelno == logging.ERROR  # errors always pass
    finally:
        logger.setLevel(before)


def _worker_on_a_fake_engine(tmp_path: Path) -> tuple[Any, Any, dict[str, Any]]:
    from session_manager._worker.iii_host import start
    from session_manager.testing import FakeEngine

    seed = {"adapter": {"name": "fs", "config": {"data_dir": str(tmp_path / "data")}}}
    fake = FakeEngine()
    return fake, start(fake, seed), seed


def test_reconnect_to_an_engine_that_lost_the_configuration_registers_the_seed_and_logs_no_more(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: the engine back after a restart (its configuration store in memory, as the
    # stand-in's) answering the re-read with not found: an ERROR and a WARNING for that one
    # re-read after the "reconnected" line, and a worker cut off from its configuration until
    # restarted; and an unchanged configuration re-read logged as "configuration reloaded".
    fake, host, seed = _worker_on_a_fake_engine(tmp_path)
    try:
        fake.config_store.clear()  # the engine came back without it
        caplog.set_level(logging.INFO, logger="session_manager")
        cli._reload_quietly(host, seed)
        assert fake.config_store["session-manager"]["value"] == seed
        assert [r.getMessage() for r in caplog.records if r.name.startswith("session_manager")] == []
    finally:
        host.close()


def test_reconnect_reread_that_fails_is_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: one failed re-read after a reconnect logged twice (the reloader's ERROR, then a
    # WARNING repeating it).
    fake, host, _seed = _worker_on_a_fake_engine(tmp_path)
    try:
        fake.config_store.clear()
        caplog.set_level(logging.INFO, logger="session_manager")
        cli._reload_quietly(host)  # no seed to register: nothing to read back
        said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name.startswith("session_manager")]
        assert len(said) == 1 and said[0][0] == "ERROR" and "not found" in said[0][1], said
    finally:
        host.close()
