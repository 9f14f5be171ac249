"""What any coordinator runs on: the runtime, timers, results and the loader."""
