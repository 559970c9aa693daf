"""Deployment: cold start of `python app.py`, ZeroGPU's path on a real GPU, the AOTInductor step."""
