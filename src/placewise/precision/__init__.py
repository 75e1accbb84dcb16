"""Quality evidence for lower precision: emulation, metrics, policy and budgets.

- ``metrics``: output quality against the fp32 reference (``rel_l2``, ``cosine``,
  ``max_abs``, ``top1``), per output and worst over a graph's outputs;
- ``emulate``: the whole model run on this CPU with chosen ops emulated at int8, fp16 or
  bf16 (``Emulator``), and the schemes it assumes (``scheme``);
- ``policy``, ``inputs``, ``evidence``: the user's precision policy and budget, the
  representative inputs, and the evidence a plan records.

Submodules are imported on use (this package imports nothing itself).
"""
