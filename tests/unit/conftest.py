"""Pure functions: text, tokenizer, prompt rows, audio helpers, voices' catalog and sources.
No model runs here and no server starts."""
