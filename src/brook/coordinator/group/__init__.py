"""The group coordinator: classic groups, committed offsets and the ``__consumer_offsets`` topic."""
