"""The floor every layer stands on: ``config`` (``option()``, one declaration per option: default, bounds, choices,
help; ``Options``, the frozen dataclass that checks itself against them) and ``validation`` (the argument checks of
every public function; ``ConfigError`` and ``ConfigTypeError``).

Imports: nothing of ``scaling``.
"""
