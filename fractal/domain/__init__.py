"""Pure decisions: strings and numbers in, values out. No I/O, no clock reads.

Nothing in this package imports from the rest of fractal.
"""
