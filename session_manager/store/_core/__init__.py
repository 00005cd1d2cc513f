"""What every storage adapter shares and no adapter owns.

State over a mapping, the CAS rules, the JSON line codec, resync batches and
the known-sessions set live here; nothing in this package imports an adapter.
"""
