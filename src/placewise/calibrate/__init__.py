"""Calibration: measurement that drives the runtime on this machine's devices.

``profile`` times every distinct op at its real shape in pinned worker processes and fits
the per-(device, kind, precision) models; ``context`` runs the whole model with the
executor through the measurement campaign (``placewise.runtime.campaign``) and times every
region, transfer and hand-off in model order. Both write ``placewise.cost.calibrated``
records; ``cost/`` itself never drives the runtime.
"""
