"""Browsing a session store for people: what the data CLI (``session-manager
data ls/show``) and the viewer share, below both so neither imports the other.

:mod:`.reading` reads sessions, branches and trees through a
:class:`~session_manager.SessionManager`; :mod:`.render` turns them into
text (tables, one-line previews, times); :mod:`.filters` parses the
``KEY=VALUE`` metadata filters both take.
"""
