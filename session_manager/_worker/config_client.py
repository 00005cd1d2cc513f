"""Integration with iii's configuration worker (entry id ``session-manager``).

Boot: probe the stored value, register the schema (with an initial value
when nothing is stored, or the ``--config`` seed, which the configuration
worker never lets overwrite a stored value), fetch the live value. Every
call retries with backoff; configuration is a required boot dependency.

Reload: ``session::on-config-change`` (the target of an observer on
``configuration::on-updated``) ignores its payload on purpose and re-reads
the authoritative value, under one lock held across fetch, build and swap,
so overlapping updates converge on the newest stored value. A value that
cannot be parsed or built keeps the running runtime (last-good) and is
reported by ``session::config-status``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .. import _bus as bus
from .._bus import Bus, ObserverHandle
from .._wire.shape import build
from ..errors import BuildError as BuildError  # (re-exported: the old import path keeps working)
from ..errors import ConfigError, NotFound, RemoteError, SeedError, StoreError, Unavailable
from ..errors import ConfigurationRefused as ConfigurationRefused
from ..errors import ConfigurationUnavailable as ConfigurationUnavailable
from .config_value import CONFIG_ID, WorkerConfig, config_schema, parse_config
from .seed import Seed

log = logging.getLogger("session_manager.configuration")

ON_UPDATED = "configuration::on-updated"
ON_CONFIG_CHANGE = "session::on-config-change"
CONFIG_STATUS = "session::config-status"
CONFIG_NAME = "Session Manager"
CONFIG_DESCRIPTION = (
    "Storage adapter (fs with its data_dir, or bridge with url / timeout_ms), the default and "
    "maximum page sizes of session::list / session::messages, and the attachment size cap."
)
UPDATED_FILTERS: dict[str, Any] = {
    "input.id": {"$eq": CONFIG_ID},
    "input.event_type": {"$eq": "configuration:updated"},
}


# --------------------------------------------------------------------------
# Wire models of the two configuration functions
# --------------------------------------------------------------------------

_Loose = ConfigDict(extra="ignore")


class OnConfigChangeRequest(BaseModel):
    """Payload of ``session::on-config-change``: advisory only, the handler
    re-reads the stored value (a discoverable function must not let any
    caller inject configuration)."""

    model_config = _Loose
    id: str | None = Field(default=None, description="Configuration id that changed (advisory).")


class OnConfigChangeResponse(BaseModel):
    ok: bool


class ConfigStatusRequest(BaseModel):
    """``session::config-status`` takes no arguments; unknown keys are ignored."""

    model_config = _Loose


class ConfigStatusResponse(BaseModel):
    last_outcome: Literal["applied", "rejected"] = Field(
        description="applied: the live runtime reflects the newest value the worker loaded; "
        "rejected: the newest value could not be built and an older runtime still serves.")
    last_error: str | None = Field(description="Why the most recent rejected reload was refused.")
    rejected_reloads: int = Field(ge=0, description="Rejected reloads since start (never reset).")
    # Counters of contention and background work since start (see _service/stats.py).
    cas_retries: int = Field(default=0, ge=0, description="Mutations re-decided after a compare-and-set "
                             "conflict with another writer of the session.")
    events_coalesced: int = Field(default=0, ge=0, description="session::on-message-updated events merged "
                                  "into a newer revision of the same entry while the event queue was full.")
    events_dropped: int = Field(default=0, ge=0, description="Events dropped while the event queue was full "
                                "(never on-created, on-message-added or on-deleted).")
    compactions: int = Field(default=0, ge=0, description="Session logs the live fs store rewrote as their "
                             "live state (0 in bridge mode).")
    publish_timeouts: int = Field(default=0, ge=0, description="Bridged calls that answered session/storage "
                                  "because publishing their events to the main stayed full for timeout_ms.")
    retention_last_sweep_at: int | None = Field(default=None, description="When the last retention sweep ran "
                                                "(ms since epoch); null: none since start.")
    retention_last_swept: int = Field(default=0, ge=0, description="Sessions the last retention sweep deleted.")
    retention_last_error: str | None = Field(default=None, description="Why the last retention sweep stopped "
                                             "early (absent when it finished).")


# --------------------------------------------------------------------------
# Calls with retry
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Retry:
    """``attempts`` calls, sleeping ``delays[i]`` seconds after failure ``i``."""

    attempts: int = 3
    delays: Sequence[float] = (0.25, 0.5)
    timeout_ms: int = 5000
    sleep: Callable[[float], None] = time.sleep


# Boot waits for a configuration worker that is (re)starting ~40 s in all,
# the backoff capped at 5 s, one log line per wait; then the worker exits.
BOOT_RETRY = Retry(attempts=12, delays=(0.25, 0.5, 1.0, 2.0, 4.0, 5.0))
RELOAD_RETRY = Retry()


def call(client: Bus, function_id: str, payload: dict[str, Any], retry: Retry) -> Any:
    """Call a configuration function, retrying what may succeed next time.

    :class:`~session_manager.errors.NotFound` (nothing is stored under the
    id) is an answer and raised at once; only a transient failure (the
    worker not up yet: ``function_not_found``, a timeout, a lost link) is
    retried; any other error answer is permanent: :class:`ConfigurationRefused`.
    """
    last: StoreError | None = None
    for attempt in range(retry.attempts):
        try:
            return bus.call(client, function_id, payload, retry.timeout_ms)
        except NotFound:
            raise
        except RemoteError as e:
            raise ConfigurationRefused(f"{function_id} refused: {e}") from e
        except Unavailable as e:
            last = e
            if attempt + 1 < retry.attempts:
                delay = retry.delays[min(attempt, len(retry.delays) - 1)] if retry.delays else 0.0
                log.warning("%s failed (attempt %d/%d): %s; retrying in %.2fs",
                            function_id, attempt + 1, retry.attempts, e, delay)
                retry.sleep(delay)
    raise ConfigurationUnavailable(f"{function_id} failed after {retry.attempts} attempts: {last}")


def probe(client: Bus, retry: Retry) -> bool:
    """Whether a value is stored for our id."""
    try:
        answer = call(client, "configuration::get", {"id": CONFIG_ID}, retry)
    except NotFound:
        return False
    return isinstance(answer, dict) and answer.get("value") is not None


def fetch(client: Bus, retry: Retry) -> WorkerConfig:
    """The live (env-expanded) value, parsed; ``ConfigError`` if it does not parse."""
    try:
        answer = call(client, "configuration::get", {"id": CONFIG_ID}, retry)
    except NotFound as e:
        raise ConfigurationUnavailable(f"configuration `{CONFIG_ID}` not found: {e}") from e
    value = answer.get("value") if isinstance(answer, dict) else None
    return parse_config(value)


def register_and_fetch(client: Bus, seed: Seed | dict[str, Any] | None = None,
                       retry: Retry = BOOT_RETRY) -> WorkerConfig:
    """Register the schema (+ initial value) and return the live configuration.

    Raises :class:`ConfigurationUnavailable`, :class:`ConfigurationRefused`
    or :class:`ConfigError` (:class:`~.seed.SeedError` for a seed that cannot
    be used while nothing is stored) with a message naming the cause; all
    are fatal at boot.
    """
    payload: dict[str, Any] = {"id": CONFIG_ID, "name": CONFIG_NAME, "description": CONFIG_DESCRIPTION,
                               "schema": config_schema()}
    stored = probe(client, retry)
    if isinstance(seed, Seed):
        if seed.problem is not None and not stored:
            raise SeedError(f"config seed {seed.path} {seed.problem}; nothing is stored for `{CONFIG_ID}`, "
                            "so there is no configuration to start from")
        if seed.problem is not None:
            log.warning("config seed %s ignored: it %s (a value is stored for `%s`, which is used)",
                        seed.path, seed.problem, CONFIG_ID)
        seed = seed.value
    if seed is not None:
        # The configuration worker applies initial_value only when nothing is stored.
        payload["initial_value"] = seed
        if stored:
            log.info("a value is stored for `%s`; the --config seed is not applied", CONFIG_ID)
    elif not stored:
        payload["initial_value"] = WorkerConfig().to_value()
    call(client, "configuration::register", payload, retry)
    config = fetch(client, retry)
    log.info("configuration `%s` loaded (adapter %s)", CONFIG_ID, config.adapter.name)
    return config


def register_again(client: Bus, seed: dict[str, Any], retry: Retry = RELOAD_RETRY) -> None:
    """After a reconnect: register the schema again, with the seed this worker booted from as
    the initial value (the configuration worker applies it only when nothing is stored). An
    engine that came back without the stored configuration (restarted, its store in memory)
    then holds the one a fresh boot would register, and the re-read finds it."""
    payload: dict[str, Any] = {"id": CONFIG_ID, "name": CONFIG_NAME, "description": CONFIG_DESCRIPTION,
                               "schema": config_schema(), "initial_value": seed}
    call(client, "configuration::register", payload, retry)


def observe_updates(client: Bus, timeout_s: float = 5.0) -> ObserverHandle:
    """Observe our entry's ``configuration:updated`` events with
    ``session::on-config-change`` as the target (which must be registered)."""
    handle = client.observe(
        {"function_id": ON_UPDATED, "filters": dict(UPDATED_FILTERS), "deliver": "input"},
        ON_CONFIG_CHANGE,
    )
    try:
        handle.ready(timeout=timeout_s)
    except Exception as e:
        raise ConfigurationUnavailable(f"cannot observe {ON_UPDATED}: {e}") from e
    return handle


# --------------------------------------------------------------------------
# Reloads
# --------------------------------------------------------------------------


class ReloadStatus:
    """What ``session::config-status`` reports."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcome: Literal["applied", "rejected"] = "applied"
        self._error: str | None = None
        self._rejected = 0

    def applied(self) -> None:
        with self._lock:
            self._outcome, self._error = "applied", None

    def rejected(self, error: str) -> None:
        with self._lock:
            self._outcome, self._error = "rejected", error
            self._rejected += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return build[ConfigStatusResponse](last_outcome=self._outcome, last_error=self._error,
                         rejected_reloads=self._rejected)


class Reloader:
    """Serialized re-read and apply of the stored configuration.

    ``apply(config)`` builds and swaps (raising :class:`BuildError` to keep
    the previous runtime).
    """

    def __init__(self, client: Bus, apply: Callable[[WorkerConfig], None],
                 status: ReloadStatus | None = None, retry: Retry = RELOAD_RETRY) -> None:
        self._client = client
        self._apply = apply
        self.status = status or ReloadStatus()
        self._retry = retry
        self._lock = threading.Lock()
        self._stopped = False

    def stop(self) -> None:
        """Wait for a reload in progress, then apply no more (shutdown)."""
        with self._lock:
            self._stopped = True

    def reload(self) -> dict[str, Any]:
        """Fetch inside the lock, so the last reload to run applies the newest value.
        A configuration worker that stays unavailable (or refuses) fails the
        reload and keeps the running runtime; a bad value answers ok."""
        with self._lock:
            if self._stopped:
                return build[OnConfigChangeResponse](ok=True)
            try:
                config = fetch(self._client, self._retry)
            except (ConfigurationUnavailable, ConfigurationRefused) as e:
                # Not a rejected value: the running runtime keeps serving and
                # the next update or reconnect reads again.
                log.error("configuration reload failed, keeping the running runtime until the next update "
                          "or reconnect: %s", e)
                raise
            except ConfigError as e:
                log.error("configuration reload rejected, keeping the running config: %s", e)
                self.status.rejected(str(e))
                return build[OnConfigChangeResponse](ok=True)
            try:
                self._apply(config)
            except BuildError as e:
                # Last-good: re-fetching would only return the same bad value.
                log.error("configuration reload rejected, keeping the running runtime: %s", e)
                self.status.rejected(str(e))
                return build[OnConfigChangeResponse](ok=True)
            self.status.applied()
            return build[OnConfigChangeResponse](ok=True)
