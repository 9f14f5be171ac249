"""The broker: asyncio server, connections, API handlers, partitions and metadata."""
