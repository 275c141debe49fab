"""Fault injection (issue 8): real supervisors in a private tmux server, one fault at a
random point, then the invariants of ``invariants.py``. ``make soak`` runs every scenario
(tests marked ``soak``); ``test_quick.py`` runs a few of them in ``make test``."""
