"""The closed loop (issue 16), one module per job:

- ``planset`` (a package: ``record``, ``mix``, ``choice``, ``build``, ``file``, ``report``,
  ``export``): plan sets for shape envelopes: buckets chosen by expected cost over a shape
  mix, shared placements, padding, weights once per device;
- ``trace``, ``serving``, ``serving_sim``: shape traces and a plan set served per bucket
  (resident executors, padding waste, class priorities), for real and simulated;
- ``recalibrate``: the per-key update of a calibration from telemetry windows
  (``runtime.windows``) into a new versioned file (stable tags live in ``runtime.telemetry``);
- ``guardrail``, ``promote``, ``store``: the promotion statistics, the interleaved A/B run
  and the last-known-good store with its rollback;
- ``loop``, ``loop_steps``, ``loop_figures``: the loop over a replayed drifting trace.

Import the submodules; this package re-exports nothing."""
