"""Runtime: run source ops for real on local devices (op runners; the executor builds on them)."""
