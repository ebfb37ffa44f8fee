"""Notebook cells by the names IPython gives them: ``Cell In[2], line 5``, not the file it
compiled the cell as (``/tmp/ipykernel_4242/817962334.py`` in a kernel, ``<ipython-input-2-…>``
in a terminal).

IPython (8 and later) keeps the map from those files to cell numbers in its compiler
(``shell.compile``, a ``CachingCompiler``: ``_filename_map``, read through ``format_code_name``,
which answers ``("Cell", "In[2]")``). :func:`install` tells the shim each file's name
(``cuguard_file_alias``) for the cells already run and for every later one, as IPython caches
it, so that every report written afterwards (snapshots, ``%cuguard``, the report at the kernel's
end, read by ``cuguard summary``) shows the cell's name. :func:`display_name` is the same mapping,
for what the ``%cuguard`` magic shows live.

``%load_ext cuguard`` calls :func:`install`; nothing else here runs on import.
"""

import functools
from typing import Any, Dict, Optional

from . import _abi

#: Set on a compiler whose cells are registered already.
_INSTALLED = "__cuguard_cells__"


def display_name(shell: Any, file: str) -> Optional[str]:
    """IPython's name of the cell compiled as ``file`` (``Cell In[2]``); ``None`` for any other
    file, or when the shell does not say."""
    compiler = getattr(shell, "compile", None)
    name_of = getattr(compiler, "format_code_name", None)
    if name_of is None or not file:
        return None
    try:
        named = name_of(file)
    except Exception:
        return None
    if not named:
        return None
    label, name = named
    return f"{label} {name}"


def install(shell: Any) -> None:
    """Names every cell of ``shell`` for the shim: those already run now, each later one when
    IPython compiles it (and again after it ran). Does nothing outside the shim, for a shell
    without IPython's caching compiler, or a second time."""
    compiler = getattr(shell, "compile", None)
    if compiler is None or getattr(compiler, _INSTALLED, False):
        return
    if not hasattr(compiler, "format_code_name") or _abi.inactive_reason() is not None:
        return
    told: Dict[str, str] = {}

    def sync(*_: Any) -> None:
        files = list(getattr(compiler, "_filename_map", None) or ())
        for file in files:
            display = display_name(shell, file)
            if display is None or told.get(file) == display:
                continue
            try:
                _abi.file_alias(file, display)
            except (_abi.CuguardError, ValueError, OSError):
                continue
            told[file] = display

    cache = getattr(compiler, "cache", None)
    if callable(cache):

        @functools.wraps(cache)
        def cache_and_name(*args: Any, **kwargs: Any) -> Any:
            name = cache(*args, **kwargs)
            sync()
            return name

        compiler.cache = cache_and_name
    events = getattr(shell, "events", None)
    if events is not None:
        try:
            events.register("post_run_cell", sync)
        except Exception:
            pass
    setattr(compiler, _INSTALLED, True)
    sync()
