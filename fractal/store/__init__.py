"""fractal.store."""
