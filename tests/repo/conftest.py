"""The repository's own rules: the import layering, file sizes, citations, environment reads, the
CI flags, the generated figures and build files. No model runs here and no server starts."""
