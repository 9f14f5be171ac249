"""Group coordination and offset management on the __consumer_offsets topic (sans-I/O)."""
