"""fractal.workspace."""
