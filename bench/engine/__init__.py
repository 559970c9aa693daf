"""The engine in one process: the level bench (`python -m bench.engine`), where its time goes, the
host's ceiling, the CPU runners side by side, precision fidelity, the upstream reference, and the
GPU's codec attention and checks."""
