"""fractal.agents."""
