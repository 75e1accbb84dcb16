"""Measurements taken on the target by its own tools, imported as a calibration.

Readers, one per tool format, parse a file into an ``ImportedProfile`` (``records``):
onnxruntime's profiling trace (any execution provider), trtexec's ``--exportProfile`` with
``--exportLayerInfo``, torch.profiler's Chrome trace. ``build`` matches the measured regions
to a graph's ops and writes calibration keys with their provenance; what no measurement
covers keeps the roofline.
"""
