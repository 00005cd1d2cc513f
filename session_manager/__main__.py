"""``python -m session_manager``: the worker CLI."""

from ._cli.main import main

raise SystemExit(main())
