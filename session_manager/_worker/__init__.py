"""The iii worker: the host on an iii engine, its configuration (value and
the configuration-worker client), the bridge link, the CLI and the manifest."""
