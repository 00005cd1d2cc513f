"""The command line: :mod:`.main` (the ``session-manager`` console script: ``data``
goes to :mod:`.data`, everything else to the worker's own command line,
:mod:`session_manager._worker.main`)."""
