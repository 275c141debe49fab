"""fractal.procs: the process plumbing, at effect level below both lifecycle/ and runtime/.

Spawning programs, signalling and stopping process groups, running a command to its end
(``commands``), reading ``/proc`` (``procinfo``) and a process's supervisor ancestry
(``ancestry``). The verbs and the loop both use it, as they share ``fractal/control.py``.
"""
