"""Where the tests find real target profiles.

Files re-sourced from the stored index of public files are committed under
tests/data/target_profiles/ (SOURCES.md there). Files that came from repository snapshots
are data the project may not commit: they are kept outside the repository, in the steering
checkout's shared folder (``<checkout>/../shared/target_profiles``, same sub-layout and its own
SOURCES.md/README.md), or wherever ``PLACEWISE_TARGET_PROFILES`` points. A test that needs one
of those skips, saying where to put it, when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

COMMITTED = Path(__file__).resolve().parents[1] / "data" / "target_profiles"
ENV = "PLACEWISE_TARGET_PROFILES"


def shared_dir() -> Path:
    """The folder holding the profiles kept outside the repository."""
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "target_profiles"


def shared_file(relative: str, what: str) -> Path:
    """``shared_dir() / relative``, or skip the test saying where the file belongs."""
    path = shared_dir() / relative
    if not path.is_file():
        pytest.skip(f"{what} are kept outside the repository (fetched data is not committed): "
                    f"put them in {shared_dir()} (or set {ENV}); missing {relative}; "
                    f"provenance in tests/data/target_profiles/SOURCES.md")
    return path
