"""The reliability figures of docs/RELIABILITY.md: the real app under load, disconnects, a soak and
hostile clients, measured from outside with the clients the tests assert with (`bench/lib`)."""
