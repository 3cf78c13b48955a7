"""Where ranks sit and how they talk (docs/design.md, "Failures").

layout.py          Parallel, Layout: data replicas x pipeline stages x sequence ranks; groups
rendezvous.py      joining the default group, every wait bounded and the missing rank named
agreement.py       what every rank must agree on before a step, and on its setup
failure_board.py   how every rank learns which rank was lost
failures.py        Failures: a lost peer as the error naming it, around every run
gradient_group.py  the collectives of a stage's gradient group (sums, ZeRO-1)
exit_hooks.py      the process groups destroyed at exit while the interpreter is whole
"""
