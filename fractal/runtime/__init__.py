"""fractal.runtime."""
