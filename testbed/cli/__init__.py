"""The command line (``testbed ...``)."""
