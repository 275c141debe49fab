"""The offline demo: a sample project with a real bug, and a deterministic agent."""
