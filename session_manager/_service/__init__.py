"""Domain layer: the 21 functions over a :class:`~session_manager.store.SessionStore`.
Every method returns ``(response, events)`` and never emits."""
