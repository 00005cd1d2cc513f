"""``session-manager``: run the worker on an iii engine.

    session-manager [--url ws://127.0.0.1:49134] [--config seed.yaml]
    session-manager --manifest | --version
    session-manager data SUBCOMMAND DATA_DIR ...   (see session_manager._cli.data)

Connects (waiting, with a log line, while the engine is unreachable), boots
from the configuration worker, serves until SIGINT/SIGTERM, then refuses new
calls, lets in-flight ones finish (each acknowledged mutation is already
durable), delivers queued events and disconnects.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from .. import __version__
from .._args import OneLineParser, environment_epilog, log_level
from .._bus import Bus
from ..errors import BuildError, ConfigError, ConfigurationRefused, ConfigurationUnavailable, SeedError, SessionError
from .manifest import DESCRIPTION, NAME, manifest
from .sdk import SdkBus
from .seed import read_seed

if TYPE_CHECKING:
    from .iii_host import IIIHost

log = logging.getLogger("session_manager")

DEFAULT_URL = "ws://127.0.0.1:49134"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = OneLineParser(
        prog=NAME, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="inspect or repair a data_dir without an engine: session-manager data --help\n\n"
               + environment_epilog())
    parser.add_argument("--url", default=os.environ.get("III_URL") or DEFAULT_URL,
                        help="engine WebSocket URL (default: $III_URL or %(default)s)")
    parser.add_argument("--config", metavar="PATH",
                        help="YAML seed for the configuration entry; applied only when none is stored")
    parser.add_argument("--manifest", action="store_true", help="print the registry manifest JSON and exit")
    parser.add_argument("--version", action="version", version=f"{NAME} {__version__}")
    parser.add_argument("--log-level", type=log_level, default=os.environ.get("SESSION_MANAGER_LOG") or "INFO",
                        help="logging level (default: $SESSION_MANAGER_LOG or INFO)")
    return parser.parse_args(argv)


def connect(url: str) -> SdkBus:
    """A client that connects (and reconnects) in the background."""
    return SdkBus(url, worker_name=NAME, description=DESCRIPTION)


def wait_connected(client: SdkBus, url: str, stop: threading.Event) -> bool:
    """Block until connected (True) or stopped / fatally rejected (False). One line says the
    engine is unreachable (after a second), however long the wait: one line per state change."""

    def waiting() -> None:
        log.warning("waiting for the iii engine at %s: unreachable, retrying (Ctrl+C to stop)", url)

    return client.wait_connected(stop=stop, on_waiting=waiting, first_note_s=1.0, note_every_s=math.inf)


def _install_signals(stop: threading.Event) -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        log.info("%s received: shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def _watch_reconnects(client: Bus, url: str, host: IIIHost,
                      seed: dict[str, Any] | None = None) -> Callable[[], None]:
    """Log connection changes, one line each (down, back, failed for good: the SDK's
    disconnected/reconnecting steps of one outage are one change); after a reconnect register
    the configuration again (``seed``: the boot seed, stored only where nothing is) and re-read
    it (it may have changed while we were away)."""
    state = {"last": "up"}

    def on_state(new: str) -> None:
        now = "up" if new == "connected" else "failed" if new == "failed" else "down"
        last, state["last"] = state["last"], now
        if now == last:
            return
        if now == "up":
            log.info("reconnected to %s", url)
            threading.Thread(target=_reload_quietly, args=(host, seed), daemon=True).start()
        elif now == "down":
            log.warning("connection to %s lost (%s); retrying", url, new)
        else:
            log.error("connection to %s failed for good", url)

    return client.add_connection_state_listener(on_state)


def _reload_quietly(host: IIIHost, seed: dict[str, Any] | None = None) -> None:
    """Register and re-read the configuration after a reconnect. A failure is one line: the
    reloader's own (it names the cause), not a second one here."""
    from .config_client import register_again

    if seed is not None:  # (without one, nothing to restore: a register alone would read as "no value")
        try:
            register_again(host.client, seed)
        except (ConfigurationUnavailable, ConfigurationRefused) as e:
            log.debug("configuration register after reconnect failed: %s", e)  # the re-read reports
    try:
        host.reloader.reload()
    except (ConfigurationUnavailable, ConfigurationRefused):
        pass  # logged by the reloader, once
    except Exception as e:
        log.warning("configuration re-read after reconnect failed: %s", e)


class QuietDomainErrors(logging.Filter):
    """The SDK logs every failed handler with a traceback; a ``session/*``
    error is an answer to the caller, not a fault: keep one short line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None and not isinstance(exc, SessionError):
            exc = exc.__cause__ or exc.__context__
        if isinstance(exc, SessionError):
            record.msg, record.args = "%s answered %s", (record.getMessage(), exc)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


class QuietWhileDown(logging.Filter):
    """The SDK warns on every connection attempt that fails (its client, and its telemetry
    exporter): while the engine is down that is two lines every retry, where our own state lines
    say it once. Such warnings are DEBUG while the client is not connected (shown with
    ``--log-level DEBUG``); with the engine up every SDK warning passes as it is."""

    def __init__(self, connected: Callable[[], bool]) -> None:
        super().__init__()
        self._connected = connected

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING or self._connected():
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


# The SDK loggers whose connection warnings repeat per retry (names are public: logging config).
RETRYING_LOGGERS = ("iii.iii", "iii.telemetry_exporters")


def quiet_retries(client: SdkBus) -> None:
    """Install :class:`QuietWhileDown` on the SDK loggers that retry a lost engine."""
    quiet = QuietWhileDown(lambda: client.connection_state() == "connected")
    for name in RETRYING_LOGGERS:
        logging.getLogger(name).addFilter(quiet)


def main(argv: Sequence[str] | None = None) -> int:
    """The worker's command line (``session-manager`` without ``data``; :mod:`session_manager._cli.main` dispatches)."""
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.manifest:
        print(json.dumps(manifest(), indent=2))
        return 0
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Boot the worker, serve until stopped, shut down; the exit status.

    1. Logging: the level asked for; a ``session/*`` answer is one short line, not a traceback.
    2. Seed: read the ``--config`` file (used only when no configuration is stored).
    3. Signals: SIGINT and SIGTERM ask for a clean stop.
    4. Connect to the engine, waiting (one log line) while it is unreachable;
       an engine that refuses the worker ends it (status 1).
    5. Configuration: register its schema, fetch the stored value (storing the
       seed when there is none), waiting for the configuration worker
       (:func:`~session_manager._worker.config_client.register_and_fetch`).
    6. Runtime: build the store the adapter names (fs, sqlite, postgres) or
       connect to a bridge's main, and the service over it (never a silent
       fallback: a failure here ends the worker with status 1).
    7. Register every function served, from the one table
       (:data:`~session_manager._worker.served.SERVED`).
    8. Observe configuration updates (each one re-read and applied, or rejected
       and reported by ``session::config-status``); re-read it after a reconnect.
    9. Serve until stopped.
    10. Shut down: refuse new calls, let in-flight ones finish, deliver queued
        events, release the store, disconnect.

    Steps 5 to 8 are :func:`~session_manager._worker.iii_host.start`.
    """
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("iii.iii").addFilter(QuietDomainErrors())
    seed = read_seed(args.config) if args.config else None
    stop = threading.Event()
    _install_signals(stop)

    from .iii_host import start

    log.info("%s %s connecting to %s", NAME, __version__, args.url)
    client = connect(args.url)
    quiet_retries(client)
    host = None
    try:
        if not wait_connected(client, args.url, stop):
            if stop.is_set():
                return 0
            log.error("the engine at %s refused this worker: %s", args.url, client.refusal())
            return 1
        log.info("connected to %s", args.url)
        try:
            host = start(client, seed, local_url=args.url)
        except (BuildError, SeedError, ConfigurationRefused) as e:
            # e.g. an unreachable bridge main or an unusable seed: never a silent fallback
            log.error("cannot start: %s", e)
            return 1
        except (ConfigurationUnavailable, ConfigError) as e:
            log.error("cannot start: %s (configuration is a required dependency: is the configuration "
                      "worker running on %s?)", e, args.url)
            return 1
        off = _watch_reconnects(client, args.url, host,
                                seed.value if seed is not None and seed.problem is None else None)
        log.info("%s ready: serving %s with adapter %s", NAME, args.url, host.runtime.config.adapter_label())
        while not stop.wait(0.5):
            pass
        off()
        return 0
    finally:
        if host is not None:
            host.close()
        client.shutdown()
        log.info("%s stopped", NAME)
