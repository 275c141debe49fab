"""fractal: run autonomous coding-agent loops as a tree of nodes in one git repository."""

__version__ = "0.1.0"
