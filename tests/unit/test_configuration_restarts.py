"""Configuration that survives restarts of its dependencies, and seeds refused
when they cannot be used: over the fake engine's configuration worker."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from iii import InvocationError

from session_manager._worker import config_client as cfg
from session_manager._worker import main as cli
from session_manager._worker.config_client import ON_CONFIG_CHANGE, ConfigurationRefused, ConfigurationUnavailable
from session_manager._worker.iii_host import IIIHost
from session_manager._worker.seed import SeedError, read_seed
from session_manager.testing import FakeEngine
from tests.unit.test_configuration import NO_WAIT, boot, fs

GONE = "Function configuration::{} not found in namespace default."


def gone(function: str, times: int) -> list[Exception]:
    """The configuration worker is not (yet) there: the engine's answer, ``times`` times."""
    return [InvocationError("function_not_found", GONE.format(function))] * times


def waits(caplog: pytest.LogCaptureFixture, function: str) -> int:
    return sum(1 for r in caplog.records if f"{function} failed (attempt" in r.getMessage())


@pytest.fixture
def quick_boot(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The worker's own boot retry (attempt count and cap), without the real sleeps."""
    monkeypatch.setattr(cfg, "BOOT_RETRY", cfg.Retry(attempts=cfg.BOOT_RETRY.attempts,
                                                     delays=cfg.BOOT_RETRY.delays, sleep=lambda s: None))
    yield


def run_cli(monkeypatch: pytest.MonkeyPatch, fake: FakeEngine, *args: str) -> int:
    monkeypatch.setattr(cli, "connect", lambda url: fake)
    monkeypatch.setattr(cli, "wait_connected", lambda client, url, stop: True)
    monkeypatch.setattr(cli, "_install_signals", lambda stop: None)
    return cli.main(["--url", "ws://127.0.0.1:1", *args])


def test_a_configuration_worker_restarting_during_boot_is_waited_for(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: a (re)starting configuration worker read as "nothing stored" (defaults registered over
    # the stored value) or failing the boot on its first absence.
    fake = FakeEngine()
    fake.config_store["session-manager"] = {"value": fs(tmp_path / "stored")}
    fake.config_failures["configuration::get"] = gone("get", 2)  # gone at the probe, back for the fetch
    fake.config_failures["configuration::register"] = gone("register", 1)  # and gone once more
    with caplog.at_level(logging.WARNING, logger="session_manager.configuration"):
        host = boot(fake, seed=fs(tmp_path / "seeded"))
    try:
        assert host.runtime.config.adapter_value()["config"]["data_dir"] == str(tmp_path / "stored")
        assert fake.config_store["session-manager"]["value"] == fs(tmp_path / "stored")
        assert waits(caplog, "configuration::get") == 2 and waits(caplog, "configuration::register") == 1
        assert [fid for fid, _ in fake.config_calls] == ["configuration::get"] * 3 + [
            "configuration::register"] * 2 + ["configuration::get"]
    finally:
        host.close()


def test_a_configuration_worker_that_stays_away_ends_the_boot_non_zero(
        monkeypatch: pytest.MonkeyPatch, quick_boot: None, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: a worker serving defaults without its configuration, or waiting for ever.
    fake = FakeEngine()
    fake.config_failures["configuration::get"] = gone("get", 100)
    with caplog.at_level(logging.WARNING):
        assert run_cli(monkeypatch, fake) == 1
    attempts = cfg.BOOT_RETRY.attempts
    assert [fid for fid, _ in fake.config_calls] == ["configuration::get"] * attempts
    assert waits(caplog, "configuration::get") == attempts - 1  # one line per wait
    assert max(cfg.BOOT_RETRY.delays) <= 5.0  # capped backoff
    assert "configuration is a required dependency" in caplog.text
    assert fake.functions == {} and fake.config_store == {}


def test_permanent_answers_are_never_retried(tmp_path: Path) -> None:
    # Prevents: a schema rejection retried for seconds at boot although it can never succeed.
    fake = FakeEngine()
    fake.config_failures["configuration::register"] = [
        InvocationError("SCHEMA_REJECTED", "schema rejected: additionalProperties")]
    with pytest.raises(ConfigurationRefused, match=r"configuration::register refused: .*schema rejected"):
        boot(fake, seed=fs(tmp_path / "d"))
    assert [fid for fid, _ in fake.config_calls] == ["configuration::get", "configuration::register"]
    assert fake.functions == {}


def test_a_configuration_worker_gone_during_a_reload_keeps_the_runtime_until_it_returns(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: a reload while the configuration worker restarts swapping in defaults, recording a
    # rejected value, or never applying the update once the worker is back.
    fake = FakeEngine()
    host = boot(fake, seed=fs(tmp_path / "a"))
    try:
        sid = fake.invoke("session::create", {"title": "kept"})["session_id"]
        fake.config_store["session-manager"]["value"] = fs(tmp_path / "b")
        fake.config_failures["configuration::get"] = gone("get", NO_WAIT.attempts)
        with caplog.at_level(logging.ERROR), pytest.raises(InvocationError, match="failed after 3 attempts"):
            fake.invoke(ON_CONFIG_CHANGE, {})
        assert "keeping the running runtime" in caplog.text
        assert host.runtime.config.adapter_value()["config"]["data_dir"] == str(tmp_path / "a")
        assert fake.invoke("session::get", {"session_id": sid})["meta"]["title"] == "kept"
        status = fake.invoke("session::config-status", {})
        assert status["last_outcome"] == "applied" and status["rejected_reloads"] == 0
        # back: the reconnect's re-read applies the value stored meanwhile
        cli._reload_quietly(host)
        assert host.runtime.config.adapter_value()["config"]["data_dir"] == str(tmp_path / "b")
        assert fake.invoke("session::get", {"session_id": sid}) is None  # a different data_dir now
    finally:
        host.close()


def test_a_seed_with_placeholders_and_an_invalid_value_is_refused(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: an invalid seed hidden behind ${VAR:default} registered (breaking every later boot), or
    # defaults registered in place of the seed the operator gave.
    monkeypatch.delenv("SM_TIMEOUT", raising=False)
    seed = tmp_path / "seed.yaml"
    seed.write_text("adapter:\n  name: bridge\n  config:\n    url: ws://main:1\n    timeout_ms: ${SM_TIMEOUT:soon}\n")
    fake = FakeEngine()
    with caplog.at_level(logging.ERROR):
        assert run_cli(monkeypatch, fake, "--config", str(seed)) == 1
    assert f"config seed {seed} is not a valid configuration (after ${{VAR:default}} expansion)" in caplog.text
    assert "timeout_ms" in caplog.text and "nothing is stored" in caplog.text
    assert fake.config_store == {}  # neither the seed nor the defaults were registered
    assert [fid for fid, _ in fake.config_calls] == ["configuration::get"]


def test_a_missing_seed_is_fatal_only_when_nothing_is_stored(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    # Prevents: a typo in --config silently booting on defaults (or a bridge seed falling back to fs),
    # and a stored value refused because of a seed that would be ignored anyway.
    missing = read_seed(tmp_path / "nope.yaml")
    fake = FakeEngine()
    with pytest.raises(SeedError, match=rf"config seed {tmp_path / 'nope.yaml'} cannot be read"):
        boot(fake, seed=missing)  # type: ignore[arg-type]
    assert fake.config_store == {}
    fake.config_store["session-manager"] = {"value": fs(tmp_path / "stored")}
    with caplog.at_level(logging.WARNING, logger="session_manager.configuration"):
        host: IIIHost = boot(fake, seed=missing)  # type: ignore[arg-type]
    try:
        assert "config seed" in caplog.text and "ignored" in caplog.text
        assert host.runtime.config.adapter_value()["config"]["data_dir"] == str(tmp_path / "stored")
        register = [p for fid, p in fake.config_calls if fid == "configuration::register"]
        assert len(register) == 1 and "initial_value" not in register[0]
    finally:
        host.close()


def test_unavailability_is_retried_and_nothing_stored_is_an_answer() -> None:
    # Prevents: a configuration worker that is away read as nothing stored, or NOT_FOUND retried.
    fake = FakeEngine()
    fake.config_failures["configuration::get"] = gone("get", NO_WAIT.attempts)
    with pytest.raises(ConfigurationUnavailable, match="configuration::get failed after 3 attempts"):
        cfg.probe(fake, NO_WAIT)
    assert cfg.probe(fake, NO_WAIT) is False  # then an answer: nothing stored, asked once
    assert len(fake.config_calls) == NO_WAIT.attempts + 1
