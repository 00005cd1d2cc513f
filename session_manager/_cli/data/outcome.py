"""What a ``session-manager data`` command returns: the JSON data, the text, the exit status."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Outcome:
    data: Any  # None: nothing more to print
    text: str
    code: int = 0


Handler = Callable[[argparse.Namespace], Outcome]
