"""The web app: FastAPI app, OpenAI-compatible API, Gradio page, guards. Imports `tts_core`;
`tts_core` never imports it."""
