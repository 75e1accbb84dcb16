"""The runtimes partitions run in: one module per runtime (``onnxruntime``)."""
