"""``python -m placewise.cli``."""

from placewise.cli import main

main()
