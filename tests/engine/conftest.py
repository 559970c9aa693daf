"""The engine and the synthesizer on the tiny checkpoints: scheduling, intake, the CPU and static
runners (the static one run on the CPU), step-ahead, stalls, voices, the ZeroGPU harness.
"""
