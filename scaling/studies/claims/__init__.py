"""The claims of the notes, each with its criterion and verdict (``python -m experiments.claims``).

``study`` (the config and the run), ``context`` (what the claims are measured on, how values are worded),
``verdicts`` (claims as data: criterion -> verdict), ``table`` (every claim, in the order of the page), and the
claims by family: ``random_input``, ``training``, ``norm``, ``citations``, ``unmeasurable``.

Imports: the library layers and the other studies (``sweep``, ``grid``, ``coord_check``, ``stats``).
"""
