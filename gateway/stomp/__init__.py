"""STOMP 1.0/1.1/1.2: a sans-I/O frame codec and the Twisted protocol that adapts it."""
