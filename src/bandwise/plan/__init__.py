"""The planner: search, verdict, validation, sweeps.

`bandwise.plan(...)`, the Python API's plan function, is this package made callable by the package
above it (`bandwise/__init__.py`), which sits in the API's layer; nothing here imports upward.
"""
