"""The ``--config`` seed file: read, expanded, validated as the worker will see it.

``${NAME}`` is expanded here, from this process's environment; ``${NAME:default}``
is left in the registered value for the configuration worker, which expands
it on every read. The seed is *validated* as that expansion will produce it
(the same rules, in this environment: a lone placeholder reads as a YAML
scalar, so ``timeout_ms: ${T:5000}`` is the number 5000), so a placeholder
can no longer smuggle an invalid value past the check.

A seed that is missing or invalid is not silently dropped: :class:`Seed`
carries the problem, and boot decides (a value already stored: warn, the
seed would be ignored anyway; nothing stored: refuse to start, naming the
file and the reason, rather than registering defaults in its place).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from ..errors import SeedError as SeedError  # (re-exported: the old import path keeps working)
from .config_value import parse_config

log = logging.getLogger("session_manager.config")

# ${NAME}: ours to expand. ${NAME:default} (or any placeholder): the
# configuration worker's, whose rules the check below follows.
_OURS = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ANY = re.compile(r"\$\{([^}:]+)(?::([^}]*))?\}")
_LONE = re.compile(r"^\s*\$\{[^}]*\}\s*$")


@dataclass(frozen=True)
class Seed:
    """A ``--config`` seed: ``value`` to register, or the ``problem`` with it."""

    path: str
    value: dict[str, Any] | None
    problem: str | None = None


def _ours(text: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            log.warning("config seed: ${%s} is not set; using an empty string", name)
            return ""
        return os.environ[name]

    return _OURS.sub(value, text)


def _scalar(text: str) -> Any:
    """A lone placeholder's expansion read as a YAML 1.2 core-schema scalar."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "~"):
        return None
    if re.fullmatch(r"[-+]?(0|[1-9][0-9]*)", text):
        return int(text)
    if re.fullmatch(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", text):
        return float(text)
    return text


def _as_worker_expands(text: str, missing: list[str]) -> Any:
    def sub(m: re.Match[str]) -> str:
        env = os.environ.get(m.group(1))
        if env is not None:
            return env
        if m.group(2) is not None:
            return m.group(2)
        missing.append(m.group(1))
        return m.group(0)

    out = _ANY.sub(sub, text)
    return _scalar(out.strip()) if _LONE.match(text) and out.strip() else out


def _walk(value: Any, leaf: Any) -> Any:
    if isinstance(value, str):
        return leaf(value)
    if isinstance(value, dict):
        return {k: _walk(v, leaf) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, leaf) for v in value]
    return value


def read_seed(path: str | os.PathLike[str]) -> Seed:
    """The seed at ``path``: its value to register, or why it cannot be used."""
    name = str(path)
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        return Seed(name, None, f"cannot be read: {e.strerror or e}")
    except yaml.YAMLError as e:
        return Seed(name, None, f"is not valid YAML: {str(e).splitlines()[0]}")
    value = _walk(raw if raw is not None else {}, _ours)
    if not isinstance(value, dict):
        return Seed(name, None, f"is not a mapping (got {type(value).__name__})")
    missing: list[str] = []
    expanded = _walk(value, lambda text: _as_worker_expands(text, missing))
    if missing:
        return Seed(name, None, f"references unset environment variable(s) without a default: "
                                f"{', '.join(sorted(set(missing)))}")
    try:
        parse_config(expanded)
    except ConfigError as e:
        where = " (after ${VAR:default} expansion)" if expanded != value else ""
        return Seed(name, None, f"is not a valid configuration{where}: {e}")
    return Seed(name, value)
