"""Wire layer: the data types, requests, responses and events of the contract,
cursors and payload validation. Depends on nothing but :mod:`session_manager.errors`."""
