"""Runtime: a plan's program run for real on local devices (``executor``, ``worker``, one compiled unit per partition through ``backends``); single-op runners for profiling (``opexec``)."""
