"""The in-process engine: one thread owns the model; requests enter a queue; chunks leave per request."""
