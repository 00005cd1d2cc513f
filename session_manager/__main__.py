"""``python -m session_manager``: the worker CLI."""

from ._worker.cli import main

raise SystemExit(main())
