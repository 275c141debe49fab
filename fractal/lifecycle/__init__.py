"""The verbs the CLI calls: each parses nothing, decides through ``domain``, acts through
the effect modules, and returns a frozen dataclass the CLI renders."""
