"""The one table of every function the worker serves, in registration order.

:data:`SERVED` gathers, as rows of one kind, what used to be registered from
four places: the event functions (:data:`~session_manager._hosts.surface.EVENT_SURFACE`),
the store protocol (``session::store::on-events``, the
:data:`~session_manager.store.bridge.server.STORE_FUNCTIONS` rows,
``session::store::publish-events``), the session functions
(:data:`~session_manager._hosts.surface.FUNCTIONS`) and the configuration pair
(``session::on-config-change``, ``session::config-status``). Each row's
:class:`Kind` says which handler the host gives it
(:meth:`~session_manager._worker.iii_host.IIIHost.register`); every row is
registered in either mode, so an fs <-> bridge reload needs no registration.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._hosts.surface import EVENT_SURFACE, FUNCTIONS, Function
from .._wire.schemas import json_schema
from ..store.bridge import protocol as sp
from ..store.bridge import server as ss
from . import config_client as cfg


class Kind(enum.Enum):
    EVENT = "event"  # an event function: its output is its input, observed
    ON_EVENTS = "on-events"  # the bridges' feed: an event function of the protocol
    STORE = "store"  # a session::store::* row, served by an fs runtime only
    PUBLISH = "publish"  # a bridge's events, fanned out by its main
    SESSION = "session"  # a surface function, through the host pipeline
    CONFIG_CHANGE = "config-change"
    CONFIG_STATUS = "config-status"


@dataclass(frozen=True)
class Served:
    """One registration: what the engine is told, and which row the handler serves."""

    id: str
    kind: Kind
    request: Any
    response: Any
    description: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    nullable: bool = False
    # The surface or protocol row the handler serves (None: the host's own handler).
    row: Function | ss.StoreFunction | None = None

    @property
    def observed(self) -> bool:
        """An event function: registered with the emitter's observe hooks."""
        return self.kind in (Kind.EVENT, Kind.ON_EVENTS)

    def formats(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The request and response JSON Schemas sent with the registration."""
        return json_schema(self.request), json_schema(self.response, nullable=self.nullable)


def _surface(f: Function, kind: Kind) -> Served:
    return Served(f.id, kind, f.request, f.response, f.description, f.registration_metadata(), f.nullable, f)


def _store(sf: ss.StoreFunction) -> Served:
    return Served(sf.id, Kind.STORE, sf.request, sf.response, sf.description, dict(sp.REGISTRATION_METADATA),
                  sf.nullable, sf)


_CONFIG_METADATA = {"trace_hidden": True}

SERVED: tuple[Served, ...] = (
    *(_surface(f, Kind.EVENT) for f in EVENT_SURFACE),
    Served(sp.ON_EVENTS, Kind.ON_EVENTS, sp.OnEventsEnvelope, sp.OnEventsEnvelope, ss.ON_EVENTS_DESCRIPTION,
           {**sp.REGISTRATION_METADATA, "private": True}),
    *(_store(sf) for sf in ss.STORE_FUNCTIONS),
    Served(sp.PUBLISH_EVENTS, Kind.PUBLISH, sp.PublishEventsRequest, sp.PublishEventsResponse,
           ss.PUBLISH_DESCRIPTION, dict(sp.REGISTRATION_METADATA)),
    *(_surface(f, Kind.SESSION) for f in FUNCTIONS),
    Served(cfg.ON_CONFIG_CHANGE, Kind.CONFIG_CHANGE, cfg.OnConfigChangeRequest, cfg.OnConfigChangeResponse,
           "Internal: re-reads the session-manager configuration and applies it "
           "(target of the configuration::on-updated observer).", _CONFIG_METADATA),
    Served(cfg.CONFIG_STATUS, Kind.CONFIG_STATUS, cfg.ConfigStatusRequest, cfg.ConfigStatusResponse,
           "Outcome of the most recent configuration reload (applied / rejected) "
           "and the number of rejected reloads.", _CONFIG_METADATA),
)  # fmt: skip

BY_ID: dict[str, Served] = {s.id: s for s in SERVED}
