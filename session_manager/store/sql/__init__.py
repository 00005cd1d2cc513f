"""What the postgres and sqlite adapters share (importable without psycopg).

Modules: ``keys`` (ids as stored in text columns), ``values`` (values as
their exact JSON text, and the jsonb image of filters), ``path`` (the active
path read a window at a time), ``outbox`` (an outbox's subscribers: who is
handed which event, and the resync after a gap), ``transactions`` (one call
committed with its events: the seam both adapters' transactions plug into),
``store`` (the facade both stores build on: it holds the parts and passes
each call on).
"""
