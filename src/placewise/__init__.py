"""placewise: place ML workload graphs on heterogeneous hardware."""
__version__ = "0.1.0"
