"""The command lines' own parts: shared argument handling (:mod:`.args`) and
``session-manager data`` (:mod:`.data`). The worker's entry point is
``session_manager._worker.main``; it dispatches ``data`` here."""
