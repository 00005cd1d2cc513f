"""The registry manifest printed by ``session-manager --manifest``."""

from __future__ import annotations

from typing import Any

from .. import __version__
from .config_value import default_config_value

NAME = "session-manager"
DESCRIPTION = (
    "Durable, reactive, branching store of typed conversation entries with six observable "
    "session event functions."
)
# A pure-Python worker: any platform with CPython >= 3.10; these are the
# targets the test suite runs on.
SUPPORTED_TARGETS = [
    "x86_64-unknown-linux-gnu",
    "aarch64-unknown-linux-gnu",
    "x86_64-apple-darwin",
    "aarch64-apple-darwin",
]


def manifest() -> dict[str, Any]:
    """name, version, description, default_config, supported_targets."""
    return {
        "name": NAME,
        "version": __version__,
        "description": DESCRIPTION,
        "default_config": default_config_value(),
        "supported_targets": list(SUPPORTED_TARGETS),
    }
