"""The server under load, as users drive it: `python app.py` and concurrent HTTP listeners
(`python -m bench.http.load`), two checkouts side by side, the encoders, the speech API's pieces."""
