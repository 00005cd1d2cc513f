"""``python -m session_manager``: the worker CLI."""

from ._worker.main import main

raise SystemExit(main())
