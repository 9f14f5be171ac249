"""The broker: the asyncio server, connections, one handler module per API family, topic
metadata, quotas, authentication on connections, metrics, and the wiring of the other packages
into one process. It knows every package above it in docs/architecture.md; none of them knows
it."""
