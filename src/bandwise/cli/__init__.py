"""Command-line interface: one module per command group, registered in `main.py`.

A command module only parses arguments and calls the library; it never computes.
"""
