"""The agent backends: the protocol (``base``), the static table that names them
(``registry``), and one module per CLI (``claude``, ``codex``, ``command``)."""
