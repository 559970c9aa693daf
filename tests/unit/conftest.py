"""Pure functions and the repository's own rules: text, tokenizer, prompt rows, audio helpers,
voices' catalog and sources, the import layering, file sizes, citations, environment reads,
the generated figures. No model runs here and no server starts.
"""
