"""Voice-agent benchmarks (`python -m bench.agents`): see `__main__`."""
