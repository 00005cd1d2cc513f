"""The iii host: serves the surface table on an iii engine.

Every row of :data:`~session_manager._worker.served.SERVED` (the session
functions, the event functions, the store protocol, the configuration pair) is
registered with JSON Schemas generated from its pydantic models. A session
function runs through the host pipeline both hosts share
(:func:`~session_manager._hosts.pipeline.serve`). Handlers are sync (the SDK
runs each invocation on a thread of its own) and read the live runtime on every
call (:class:`~session_manager._worker.inflight.InFlight`), so a configuration
reload needs no re-registration.

Events go out through :class:`~session_manager._worker.emitter.Emitter`
(called only while observed, fire-and-forget, after the write is durable).

Bridge topology: an fs instance also serves the internal
``session::store::*`` protocol and, once per event, calls
``session::store::on-events`` (while observed) so attached bridges can relay
it. A bridge-mode instance stores through its main
(:class:`~session_manager.store.bridge.BridgeStore`), publishes each
mutation's events to the main instead of calling its event functions, and
relays the main's ``on-events`` to its local event functions (see
:mod:`session_manager._worker.bridge_link`). The protocol functions are registered in
either mode and refuse calls while the live runtime is a bridge.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from .._bus import Bus, ObserverHandle, strip_caller
from .._hosts.pipeline import execute, serve
from .._hosts.retention import RetentionPolicy, RetentionSweeper
from .._hosts.surface import Function
from .._service.limits import LimitsCell
from .._service.service import SessionService, storage_errors
from .._service.stats import Stats
from .._wire.events import Event
from .._wire.shape import build
from .._wire.validation import parse_request
from ..clock import Clock, SystemClock
from ..errors import STORAGE, BuildError, SessionError
from ..ids import IdGen, UuidIds
from ..store.bridge import protocol as sp
from ..store.bridge import server as ss
from ..store.fs import FsStore
from ..store.sqlite import SqliteStore
from . import bridge_link as br
from . import config_client as cfg
from .config_value import BridgeAdapter, BridgeConfig, WorkerConfig
from .emitter import Emitter
from .inflight import InFlight
from .runtime import Runtime, build_store, resync_batches, same_adapter
from .seed import Seed
from .served import SERVED, Kind, Served

log = logging.getLogger("session_manager.iii")

DRAIN_TIMEOUT_S = 30.0
RESYNC_WAIT_S = 5.0  # per event, for room in the event queue; then its usual policy applies
SELF_REFERENTIAL = "self-referential bridge"

# Opens the dedicated connection to a bridge's main engine (tests inject fakes).
BridgeConnector = Callable[[BridgeConfig], Bus]


def default_bridge_connector(config: BridgeConfig) -> Bus:
    return br.connect(config.url, config.timeout_ms)


# --------------------------------------------------------------------------
# The host
# --------------------------------------------------------------------------


class IIIHost:
    """Registers the surface on an iii client and serves it from the live runtime."""

    def __init__(self, client: Bus, config: WorkerConfig, *, ids: IdGen | None = None,
                 clock: Clock | None = None, reloader_retry: cfg.Retry = cfg.RELOAD_RETRY,
                 local_url: str | None = None, bridge_connector: BridgeConnector | None = None) -> None:
        self.client = client
        self.ids: IdGen = ids or UuidIds()
        self.clock: Clock = clock or SystemClock()
        self.limits = LimitsCell(config.limits())
        self.local_url = local_url
        self.bridge_connector: BridgeConnector = bridge_connector or default_bridge_connector
        self.stats = Stats()  # shared by the services, the emitter and the bridge link
        self.emitter = Emitter(client, self.stats)
        self.reloader = cfg.Reloader(client, self.apply_config, retry=reloader_retry)
        # Calls in flight on the live runtime (raises BuildError: fatal at boot).
        self._inflight = InFlight(self._build(config))
        self.refs: dict[str, Any] = {}
        self.config_observer: ObserverHandle | None = None
        self.retention = RetentionSweeper(self._sweep_batch, self.clock, config.retention_policy())

    @property
    def runtime(self) -> Runtime:
        return self._inflight.runtime

    @property
    def status(self) -> cfg.ReloadStatus:
        return self.reloader.status

    def _build(self, config: WorkerConfig) -> Runtime:
        adapter = config.adapter
        if isinstance(adapter, BridgeAdapter):
            bridge = self._connect_bridge(adapter.config)
            service = SessionService(bridge.store, ids=self.ids, clock=self.clock, limits=self.limits,
                                     stats=self.stats)
            return Runtime(config, bridge.store, service, bridge)
        store = build_store(config)
        # A shared store hands us the events other instances made (no-op otherwise).
        store.subscribe(lambda events: self.emitter.emit(events), self.emitter.is_observed)
        store.events_ready()
        service = SessionService(store, ids=self.ids, clock=self.clock, limits=self.limits, stats=self.stats)
        return Runtime(config, store, service)

    def _connect_bridge(self, config: BridgeConfig) -> br.Bridge:
        """Connect to the main, check it serves the protocol, attach the relay."""
        if self.local_url is not None and br.normalize_url(config.url) == br.normalize_url(self.local_url):
            raise BuildError(f"{SELF_REFERENTIAL}: bridge url {config.url} is this instance's own engine; "
                                 "a bridge must point at a main fs instance on another engine")
        try:
            client = self.bridge_connector(config)
        except Exception as e:
            raise BuildError(f"bridge to {config.url} unavailable: {e}") from e
        bridge = br.Bridge(client, config.url, config.timeout_ms, self._relay, self.stats, clock=self.clock,
                           resync=lambda batch: self.emitter.emit(batch, wait_s=RESYNC_WAIT_S))
        try:
            bridge.start()
        except Exception as e:
            bridge.close()
            raise BuildError(f"bridge to {config.url} unavailable: {e}") from e
        return bridge

    def _relay(self, event: Event) -> None:
        """An event the main fanned out: to this instance's observers only."""
        self.emitter.emit([event])

    def deliver(self, runtime: Runtime, events: list[Event]) -> None:
        """Where a mutation's events go: the main (bridge mode) or our own
        event functions plus the bridges' feed (fs mode)."""
        if not events:
            return
        if runtime.bridge is not None:
            runtime.bridge.publish(events)
        else:
            self.emitter.emit(events, fanout=runtime.is_fs)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until queued publishes and event calls have been handed on;
        False if ``timeout_s`` (for each of the two queues) passed first."""
        bridge = self.runtime.bridge
        published = bridge.flush(timeout_s) if bridge is not None else True
        return self.emitter.flush(timeout_s) and published

    # -- registration -----------------------------------------------------------

    def register(self) -> None:
        """Register every row of :data:`~session_manager._worker.served.SERVED`, the one
        table of what this worker serves, in its order, in either mode."""
        for row in SERVED:
            request_format, response_format = row.formats()
            self.refs[row.id] = self.client.register_function(
                row.id, self._handler_of(row),
                description=row.description,
                metadata=dict(row.metadata),
                request_format=request_format,
                response_format=response_format,
                observe=self.emitter.hooks(row.id) if row.observed else None,
            )

    def _handler_of(self, row: Served) -> Any:
        """The handler a row of the table gets, by its kind."""
        if row.kind is Kind.SESSION:
            assert isinstance(row.row, Function)
            return self._handler(row.row)
        if row.kind is Kind.STORE:
            assert isinstance(row.row, ss.StoreFunction)
            return self._store_handler(row.row)
        return {
            Kind.EVENT: self._echo,
            Kind.ON_EVENTS: self._echo,
            Kind.PUBLISH: self._publish_events,
            Kind.CONFIG_CHANGE: self._on_config_change,
            Kind.CONFIG_STATUS: self._config_status,
        }[row.kind]

    def observe_configuration(self, timeout_s: float = 5.0) -> None:
        self.config_observer = cfg.observe_updates(self.client, timeout_s)

    # -- handlers -----------------------------------------------------------------

    def _handler(self, f: Function) -> Any:
        def handle(data: Any) -> Any:
            payload = strip_caller(data)
            with self._inflight.call() as runtime:
                # Events are handed on inside the call, so shutdown (which waits for
                # calls) never stops the emitter before they are queued.
                return serve(f, runtime.service, payload, lambda events: self.deliver(runtime, events))

        handle.__name__ = f"handle_{f.id.replace('::', '_').replace('-', '_')}"
        return handle

    @staticmethod
    def _echo(data: Any) -> Any:
        """An event function's handler: the event it is called with is its output."""
        return strip_caller(data)

    @contextlib.contextmanager
    def _fs_call(self, function_id: str) -> Iterator[Runtime]:
        """The live runtime, if it is an fs one (read per call, so the gate
        follows reloads)."""
        with self._inflight.call() as runtime:
            if not runtime.is_fs:
                mode = "bridge" if runtime.bridge is not None else \
                    "sqlite" if isinstance(runtime.store, SqliteStore) else "postgres"
                raise SessionError(STORAGE, f"{function_id}: {sp.FS_ONLY}; this instance is in {mode} mode")
            yield runtime

    def _store_handler(self, sf: ss.StoreFunction) -> Any:
        def handle(data: Any) -> Any:
            payload = strip_caller(data)
            with self._fs_call(sf.id) as runtime:
                request = parse_request(sf.request, payload)
                service = runtime.service
                # The main's own per-session lock, shared with its domain calls.
                with storage_errors():
                    return sf.handler(runtime.store, service.session_lock, request, payload)

        handle.__name__ = f"handle_{sf.id.replace('::', '_').replace('-', '_')}"
        return handle

    def _publish_events(self, data: Any) -> Any:
        payload = strip_caller(data)
        with self._fs_call(sp.PUBLISH_EVENTS):
            request = parse_request(sp.PublishEventsRequest, payload)
            events = [e for e in (sp.event_of(raw) for raw in payload["events"]) if e is not None]
            if len(events) < len(request.events):
                log.warning("publish-events: %d malformed envelopes skipped", len(request.events) - len(events))
            self.emitter.emit(events, fanout=True)
        return build[sp.PublishEventsResponse](published=len(events))

    def _on_config_change(self, data: Any) -> Any:
        return self.reloader.reload()

    def _config_status(self, data: Any) -> Any:
        compactions = getattr(self.runtime.store, "compactions", 0)  # an fs store counts its own
        return {**self.status.snapshot(), **self.stats.snapshot(), "compactions": compactions,
                **self.retention.status()}

    def _sweep_batch(self, policy: RetentionPolicy, limit: int) -> tuple[int, bool]:
        """One retention batch on the live runtime, its events delivered as a call's."""
        with self._inflight.call() as runtime:
            service = runtime.service

            def run() -> tuple[tuple[int, bool], list[Event]]:
                ids, events, more = service.expire(policy.idle_days, policy.statuses, limit)
                return (len(ids), more), events

            (count, more), _ = execute(runtime.store, run, deliver=lambda events: self.deliver(runtime, events),
                                      order=service.core.order)
        return count, more

    # -- reload -----------------------------------------------------------------

    def apply_config(self, config: WorkerConfig) -> None:
        """Swap limits, or (adapter changed) build, swap and resync; called under
        the reloader's lock. Raises BuildError to keep the running runtime."""
        current = self.runtime
        if config == current.config:
            # Nothing changed (the re-read after every reconnect, mostly): nothing to apply or log.
            log.debug("configuration re-read: unchanged")
            return
        if same_adapter(config, current.config):
            self.retention.set_policy(config.retention_policy())  # read at the next sweep
            self.limits.set(config.limits())
            if isinstance(current.store, FsStore):
                current.store.durability = config.durability  # read on every write: no rebuild
                current.store.cache_bytes = config.cache_bytes
            elif isinstance(current.store, SqliteStore):
                current.store.durability = config.durability  # each connection takes it before its next write
            self._inflight.runtime = Runtime(config, current.store, current.service, current.bridge)
            log.info("configuration reloaded: list limits %d/%d, max attachment %d bytes, durability %s",
                     config.default_list_limit, config.max_list_limit, config.max_attachment_bytes,
                     config.durability)
            return
        fresh = self._build(config)
        self._inflight.swap(fresh, also=lambda: self.limits.set(config.limits()))
        self.retention.set_policy(config.retention_policy())  # only once the new adapter serves
        log.info("configuration reloaded: adapter %s now serves", config.adapter_label())
        # The old store (an fs one's data_dir lock, a database's pool, a
        # bridge's link) ends once the calls that took it are done: closing it
        # under them would lose or fail them. The new one was built (an fs
        # one's lock taken) before the swap.
        self._inflight.drain(current.store, DRAIN_TIMEOUT_S)
        # Listed only now, once no call writes to it any more: a session created in the old store
        # while the new one was being built would otherwise never be announced as gone.
        try:
            old_metas = current.store.list_metas()
        except Exception as e:
            log.warning("cannot list the previous store's sessions (%s); resync sends no deletes", e)
            old_metas = []
        self._inflight.retire(current)
        sent = 0
        try:
            for batch in resync_batches(fresh.store, old_metas, self.clock.now_ms()):
                # Local only, never published: on an fs instance the feed also
                # reaches the attached bridges, so they resync as well.
                self.emitter.emit(batch, fanout=fresh.is_fs, wait_s=RESYNC_WAIT_S)
                sent += len(batch)
        except Exception:
            log.warning("resync after the adapter swap failed after %d events; observers may be stale", sent,
                        exc_info=True)
            return
        log.info("resync: %d events", sent)

    # -- lifetime ---------------------------------------------------------------

    def close(self, timeout_s: float = 10.0) -> None:
        """Finish a reload in progress and allow no more, refuse new calls, let
        in-flight ones finish, deliver queued events. After ``timeout_s`` it stops
        waiting to answer the calls still running, but the store (an fs data_dir's
        lock) is released only when the last of them ends: a commit in flight never
        lands in a data_dir another owner has opened meanwhile."""
        self.reloader.stop()
        self.retention.close()
        if not self._inflight.close(self._release_store, timeout_s=timeout_s):
            log.warning("%d calls still running at shutdown: not waiting to answer them; the store stays "
                        "open (its data_dir locked) until they end", len(self._inflight))
        if self.config_observer is not None:
            with contextlib.suppress(Exception):
                self.config_observer.dispose()
        bridge = self.runtime.bridge
        if bridge is not None:
            bridge.close()  # sends queued publishes, then disconnects from the main
        self.emitter.close()

    def _release_store(self) -> None:
        self.runtime.store.close()


def start(client: Bus, seed: Seed | dict[str, Any] | None = None, *, retry: cfg.Retry | None = None,
          ids: IdGen | None = None, clock: Clock | None = None, local_url: str | None = None,
          bridge_connector: BridgeConnector | None = None) -> IIIHost:
    """Boot on a connected client (steps 5 to 8 of :func:`~session_manager._worker.main.run`):

    5. fetch the configuration (registering its schema, storing ``seed`` if none is stored);
    6. build the runtime it names (:class:`IIIHost`);
    7. register every row of :data:`~session_manager._worker.served.SERVED`;
    8. observe configuration updates.

    ``local_url`` is this instance's engine (a bridge to it is refused as
    self-referential). Raises :class:`~session_manager.errors.ConfigurationUnavailable`,
    :class:`~session_manager.errors.ConfigError` or :class:`~session_manager.errors.BuildError`
    (all fatal, each with a message naming the cause; a bridge whose main is
    unreachable never falls back to a local store).
    """
    config = cfg.register_and_fetch(client, seed, retry or cfg.BOOT_RETRY)
    host = IIIHost(client, config, ids=ids, clock=clock, local_url=local_url, bridge_connector=bridge_connector)
    host.register()
    host.observe_configuration()
    return host
