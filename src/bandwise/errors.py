"""The one error type a user can cause.

Anything raised as `BandwiseError` (or `ValueError`) is printed by the CLI as one line that
names the bad value and the fix, with exit code 2; `--debug` shows the traceback.
"""


class BandwiseError(ValueError):
    """A problem with the user's input: the message names the value and how to fix it."""
