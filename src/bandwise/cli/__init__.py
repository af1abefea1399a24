"""Command-line interface: one module per command group, registered in `main.py`.

A command module only parses arguments and calls the library; it never computes. `options.py`
(the planning options, declared once) and `points.py` (what compare and sweep both print) are
shared by several commands and register none (tests/unit/test_cli_modules.py).
"""
