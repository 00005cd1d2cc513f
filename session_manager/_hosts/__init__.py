"""Host layer: the one function table both hosts register from, and the
in-process host behind :func:`session_manager.open`."""
