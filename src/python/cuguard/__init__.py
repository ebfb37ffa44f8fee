"""cuguard's Python package (PLACEHOLDER).

This file only lets the distribution build on the wip-py branch: the package's API (`active()`,
`snapshot()`, `live()`, `track()`, `label()`, `holders()`, `NotActive`) is written on another
branch, and that branch's `__init__.py` replaces this one when the two are merged.
"""

__version__ = "0.1.0"

# `%load_ext cuguard` (IPython looks for load_ipython_extension in the package itself).
from .ipython import load_ipython_extension  # noqa: E402,F401
