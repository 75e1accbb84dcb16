"""Hardware: machine specs, presets, probe of this machine."""
