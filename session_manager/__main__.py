"""``python -m session_manager``: the worker CLI."""

from .cli import main

raise SystemExit(main())
