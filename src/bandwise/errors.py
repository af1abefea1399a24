"""The error types a user can cause.

Anything raised as `BandwiseError` (or `ValueError`) is printed by the CLI as one line that
names the bad value and the fix, with exit code 2; `--debug` shows the traceback.
"""


INSTALL = {
    "train": "pip install torch==2.13.0 && pip install -e '.[train]'",
    "plot": "pip install -e '.[plot]'",
}
"""How to add an extra from a bandwise checkout. torch comes first and pinned: an unpinned torch
pulls several GB of CUDA packages (any torch >= 2.11 already installed is kept, as `scripts/test`
does)."""


class BandwiseError(ValueError):
    """A problem with the user's input: the message names the value and how to fix it."""


class NothingFits(BandwiseError):
    """The input is valid, but no layout fits in device memory: the message says what would fit."""

    exit_code = 3
