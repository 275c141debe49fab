"""``fractal open``: the live dashboard. ``snapshot`` builds the data (no Textual);
``app`` and ``screens`` draw it (Textual, imported only by ``fractal open``)."""
