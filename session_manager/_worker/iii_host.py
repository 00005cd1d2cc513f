"""The iii host: serves the surface table on an iii engine.

Every row of :data:`~session_manager._hosts.surface.FUNCTIONS` and
:data:`~session_manager._hosts.surface.EVENT_SURFACE` is registered with JSON
Schemas generated from its pydantic models, then the two configuration
functions. Handlers are sync (the SDK runs each invocation on a thread of
its own) and read the live runtime on every call, so a configuration
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
import threading
from collections.abc import Callable, Iterator
from typing import Any

from iii import ObserveHooks

from .._bus import Bus, ObserverHandle, strip_caller
from .._hosts.gate import CallGate
from .._hosts.retention import RetentionPolicy, RetentionSweeper
from .._hosts.surface import EVENT_SURFACE, FUNCTIONS, Function
from .._service.admission import admit
from .._service.limits import LimitsCell
from .._service.service import SessionService, storage_errors
from .._service.stats import Stats
from .._service.storage_errors import at_edge
from .._wire.events import Event
from .._wire.schemas import json_schema
from .._wire.shape import build
from .._wire.validation import parse_request
from ..clock import Clock, SystemClock
from ..errors import STORAGE, SessionError, StoreError
from ..ids import IdGen, UuidIds
from ..store.base import SessionStore
from ..store.bridge import protocol as sp
from ..store.fs import FsStore
from ..store.sqlite import SqliteStore
from . import bridge_link as br
from . import config_client as cfg
from . import store_server as ss
from .config_value import BridgeAdapter, BridgeConfig, WorkerConfig
from .emitter import Emitter
from .runtime import Runtime, build_store, resync_batches, same_adapter
from .seed import Seed

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
        self._runtime = self._build(config)  # raises BuildError: fatal at boot
        # Calls in flight: shutdown releases the store only once they have ended (the
        # embedded host's rule, one mechanism for both).
        self._gate = CallGate()
        # Calls in flight per store: a swapped-out runtime's link is closed
        # only once the calls that took it have finished with it.
        self._users: dict[int, int] = {}
        # Swapped-out stores whose drain gave up: each closes when its last call ends.
        self._retired: dict[int, Callable[[], None]] = {}
        self._idle = threading.Condition()
        self.refs: dict[str, Any] = {}
        self.config_observer: ObserverHandle | None = None
        self.retention = RetentionSweeper(self._sweep_batch, self.clock, config.retention_policy())

    @property
    def runtime(self) -> Runtime:
        return self._runtime

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
        service = SessionService(store, ids=self.ids, clock=self.clock, limits=self.limits, stats=self.stats)
        return Runtime(config, store, service)

    def _connect_bridge(self, config: BridgeConfig) -> br.Bridge:
        """Connect to the main, check it serves the protocol, attach the relay."""
        if self.local_url is not None and br.normalize_url(config.url) == br.normalize_url(self.local_url):
            raise cfg.BuildError(f"{SELF_REFERENTIAL}: bridge url {config.url} is this instance's own engine; "
                                 "a bridge must point at a main fs instance on another engine")
        try:
            client = self.bridge_connector(config)
        except Exception as e:
            raise cfg.BuildError(f"bridge to {config.url} unavailable: {e}") from e
        bridge = br.Bridge(client, config.url, config.timeout_ms, self._relay, self.stats, clock=self.clock,
                           resync=lambda batch: self.emitter.emit(batch, wait_s=RESYNC_WAIT_S))
        try:
            bridge.start()
        except Exception as e:
            bridge.close()
            raise cfg.BuildError(f"bridge to {config.url} unavailable: {e}") from e
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
        bridge = self._runtime.bridge
        published = bridge.flush(timeout_s) if bridge is not None else True
        return self.emitter.flush(timeout_s) and published

    # -- registration -----------------------------------------------------------

    def register(self) -> None:
        """Register event functions (with ``session::store::on-events``), the
        store protocol, session functions, then the configuration pair. All of
        them in either mode, so an fs<->bridge reload needs no registration."""
        for f in EVENT_SURFACE:
            self._register(f, self._echo, observe=self.emitter.hooks(f.id))
        self.refs[sp.ON_EVENTS] = self.client.register_function(
            sp.ON_EVENTS, self._echo,
            description=ss.ON_EVENTS_DESCRIPTION,
            metadata={**sp.REGISTRATION_METADATA, "private": True},
            request_format=json_schema(sp.OnEventsEnvelope),
            response_format=json_schema(sp.OnEventsEnvelope),
            observe=self.emitter.hooks(sp.ON_EVENTS),
        )
        for sf in ss.STORE_FUNCTIONS:
            self.refs[sf.id] = self.client.register_function(
                sf.id, self._store_handler(sf),
                description=sf.description,
                metadata=dict(sp.REGISTRATION_METADATA),
                request_format=json_schema(sf.request),
                response_format=json_schema(sf.response, nullable=sf.nullable),
            )
        self.refs[sp.PUBLISH_EVENTS] = self.client.register_function(
            sp.PUBLISH_EVENTS, self._publish_events,
            description=ss.PUBLISH_DESCRIPTION,
            metadata=dict(sp.REGISTRATION_METADATA),
            request_format=json_schema(sp.PublishEventsRequest),
            response_format=json_schema(sp.PublishEventsResponse),
        )
        for f in FUNCTIONS:
            self._register(f, self._handler(f))
        config_pair = (
            (cfg.ON_CONFIG_CHANGE, self._on_config_change, cfg.OnConfigChangeRequest, cfg.OnConfigChangeResponse,
             "Internal: re-reads the session-manager configuration and applies it "
             "(target of the configuration::on-updated observer)."),
            (cfg.CONFIG_STATUS, self._config_status, cfg.ConfigStatusRequest, cfg.ConfigStatusResponse,
             "Outcome of the most recent configuration reload (applied / rejected) "
             "and the number of rejected reloads."),
        )
        for fid, handler, request, response, description in config_pair:
            self.refs[fid] = self.client.register_function(
                fid, handler, description=description, metadata={"trace_hidden": True},
                request_format=json_schema(request), response_format=json_schema(response),
            )

    def _register(self, f: Function, handler: Any, observe: ObserveHooks | None = None) -> None:
        self.refs[f.id] = self.client.register_function(
            f.id, handler,
            description=f.description,
            metadata=f.registration_metadata(),
            request_format=json_schema(f.request),
            response_format=json_schema(f.response, nullable=f.nullable),
            observe=observe,
        )

    def observe_configuration(self, timeout_s: float = 5.0) -> None:
        self.config_observer = cfg.observe_updates(self.client, timeout_s)

    # -- handlers -----------------------------------------------------------------

    @contextlib.contextmanager
    def _call(self) -> Iterator[Runtime]:
        if not self._gate.enter():
            raise SessionError(STORAGE, "session-manager is shutting down")
        try:
            with self._idle:
                runtime = self._runtime
                key = id(runtime.store)
                self._users[key] = self._users.get(key, 0) + 1
            try:
                yield runtime
            finally:
                retired = None
                with self._idle:
                    self._users[key] -= 1
                    if not self._users[key]:
                        del self._users[key]
                        retired = self._retired.pop(key, None)
                    self._idle.notify_all()
                if retired is not None:
                    retired()  # the last call on a store swapped out under it: now nothing uses it
        finally:
            self._gate.leave()  # the last call out after a shutdown that stopped waiting releases the store

    def _drain(self, store: SessionStore, timeout_s: float) -> None:
        """Wait until no call holds ``store`` (it has just been swapped out)."""
        key = id(store)
        with self._idle:
            if not self._idle.wait_for(lambda: key not in self._users, timeout=timeout_s):
                log.warning("%d calls still use the previous store after %.0f s; it is closed when they end",
                            self._users.get(key, 0), timeout_s)

    def _retire(self, runtime: Runtime) -> None:
        """Close a swapped-out runtime's store (or bridge link) once no call uses it.
        Closing it under a call would release an fs data_dir while that call still
        writes there (another owner could hold it by then), or cut a bridge call."""
        end = runtime.bridge.close if runtime.bridge is not None else runtime.store.close
        key = id(runtime.store)
        with self._idle:
            if key in self._users:
                self._retired[key] = end
                return
        end()

    def _handler(self, f: Function) -> Any:
        serve = f.handler
        assert serve is not None, f"{f.id} is an event function"

        def handle(data: Any) -> Any:
            payload = strip_caller(data)
            with self._call() as runtime:
                admit(f.id, payload, self.limits.get(), mutates=f.mutates)
                request = parse_request(f.request, payload)
                # run_call: a shared store commits the call's events with its writes.
                try:
                    response, events = runtime.store.run_call(lambda: serve(runtime.service, request))
                except StoreError as e:
                    raise at_edge(e) from None
                # Handed on inside the call, so shutdown (which waits for calls)
                # never stops the emitter before these events are queued.
                self.deliver(runtime, events)
            return response

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
        with self._call() as runtime:
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
        compactions = getattr(self._runtime.store, "compactions", 0)  # an fs store counts its own
        return {**self.status.snapshot(), **self.stats.snapshot(), "compactions": compactions,
                **self.retention.status()}

    def _sweep_batch(self, policy: RetentionPolicy, limit: int) -> tuple[int, bool]:
        """One retention batch on the live runtime, its events delivered as a call's."""
        with self._call() as runtime:
            service = runtime.service

            def run() -> tuple[tuple[int, bool], list[Event]]:
                ids, events, more = service.expire(policy.idle_days, policy.statuses, limit)
                return (len(ids), more), events

            try:
                (count, more), events = runtime.store.run_call(run)
            except StoreError as e:
                raise at_edge(e) from None
            self.deliver(runtime, events)
        return count, more

    # -- reload -----------------------------------------------------------------

    def apply_config(self, config: WorkerConfig) -> None:
        """Swap limits, or (adapter changed) build, swap and resync; called under
        the reloader's lock. Raises BuildError to keep the running runtime."""
        current = self._runtime
        if same_adapter(config, current.config):
            self.retention.set_policy(config.retention_policy())  # read at the next sweep
            self.limits.set(config.limits())
            if isinstance(current.store, FsStore):
                current.store.durability = config.durability  # read on every write: no rebuild
                current.store.cache_bytes = config.cache_bytes
            elif isinstance(current.store, SqliteStore):
                current.store.durability = config.durability  # each connection takes it before its next write
            self._runtime = Runtime(config, current.store, current.service, current.bridge)
            log.info("configuration reloaded: list limits %d/%d, max attachment %d bytes, durability %s",
                     config.default_list_limit, config.max_list_limit, config.max_attachment_bytes,
                     config.durability)
            return
        fresh = self._build(config)
        with self._idle:
            self.limits.set(config.limits())
            self._runtime = fresh
        self.retention.set_policy(config.retention_policy())  # only once the new adapter serves
        log.info("configuration reloaded: adapter %s now serves", config.adapter_label())
        # The old store (an fs one's data_dir lock, a database's pool, a
        # bridge's link) ends once the calls that took it are done: closing it
        # under them would lose or fail them. The new one was built (an fs
        # one's lock taken) before the swap.
        self._drain(current.store, DRAIN_TIMEOUT_S)
        # Listed only now, once no call writes to it any more: a session created in the old store
        # while the new one was being built would otherwise never be announced as gone.
        try:
            old_metas = current.store.list_metas()
        except Exception as e:
            log.warning("cannot list the previous store's sessions (%s); resync sends no deletes", e)
            old_metas = []
        self._retire(current)
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
        if not self._gate.close(self._release_store, timeout_s=timeout_s):
            log.warning("%d calls still running at shutdown: not waiting to answer them; the store stays "
                        "open (its data_dir locked) until they end", len(self._gate))
        if self.config_observer is not None:
            with contextlib.suppress(Exception):
                self.config_observer.dispose()
        bridge = self._runtime.bridge
        if bridge is not None:
            bridge.close()  # sends queued publishes, then disconnects from the main
        self.emitter.close()

    def _release_store(self) -> None:
        self._runtime.store.close()


def start(client: Bus, seed: Seed | dict[str, Any] | None = None, *, retry: cfg.Retry | None = None,
          ids: IdGen | None = None, clock: Clock | None = None, local_url: str | None = None,
          bridge_connector: BridgeConnector | None = None) -> IIIHost:
    """Boot on a connected client: configuration, runtime, registrations, observer.

    ``local_url`` is this instance's engine (a bridge to it is refused as
    self-referential). Raises :class:`~.config_client.ConfigurationUnavailable`,
    :class:`~.config_value.ConfigError` or :class:`~.config_client.BuildError`
    (all fatal, each with a message naming the cause; a bridge whose main is
    unreachable never falls back to a local store).
    """
    config = cfg.register_and_fetch(client, seed, retry or cfg.BOOT_RETRY)
    host = IIIHost(client, config, ids=ids, clock=clock, local_url=local_url, bridge_connector=bridge_connector)
    host.register()
    host.observe_configuration()
    return host
