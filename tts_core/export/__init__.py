"""Export for other runtimes: ONNX graphs of the native modules, and the static in-browser studio."""
