"""The bridge adapter: store through a main instance's ``session::store::*``.

:class:`BridgeStore` (:mod:`.store`) is the adapter; :mod:`.protocol`,
:mod:`.protocol_cas` and :mod:`.protocol_search` hold the protocol's function
ids and wire models, which the server side shares (:mod:`.server`, with
:mod:`.server_atomic`: a main serving ``session::store::*`` from its local
store; the worker registers them); :mod:`.remote_path` is the active path
read window by window.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .store import BridgeStore


def __getattr__(name: str) -> Any:
    # Loaded on first use: the worker's server side imports the protocol models
    # alone, and `session_manager.store.BridgeStore` is itself lazy.
    if name == "BridgeStore":
        from .store import BridgeStore

        return BridgeStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BridgeStore"]
