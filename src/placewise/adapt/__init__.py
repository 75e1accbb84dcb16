"""The closed loop (issue 16): plan sets for shape envelopes (``planset``), stable tags and
telemetry windows back into the calibration (``recalibrate``), the promotion guardrail and
the last-known-good store (``guardrail``, ``promote``, ``store``), and the loop itself
(``loop``). Import the submodules; this package re-exports nothing."""
