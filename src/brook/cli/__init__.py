"""The `brook` command: the broker and the operator tools (see app.py for the whole tree)."""

from .app import app, main

__all__ = ["app", "main"]
