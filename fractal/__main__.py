"""``python -m fractal``: the same entry point as the ``fractal`` console script."""

from fractal.cli import main

main()
