"""The claims of the notes, each with its criterion and verdict (``python -m experiments.claims``).

``study`` (the config and the run), ``context`` (what the claims are measured on, how values are worded),
``verdicts`` (claims as data: criterion -> verdict), ``parts`` (claims that say several things), ``table`` (every
claim, in the order of the page), and the claims by kind: ``random_input`` (claims random q, k, v settle),
``training`` (claims settled by training small transformers), ``citations`` (checked against their sources) and
``unmeasurable`` (claims no measurement here can settle, with the reason).

Imports: the library layers and the other studies (``sweep``, ``grid``, ``coord_check``, ``stats``).
"""
