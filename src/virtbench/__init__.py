"""virtbench: what does this platform cost my workload?"""

__version__ = "0.1.0"
