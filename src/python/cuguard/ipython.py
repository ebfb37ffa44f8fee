"""IPython and Jupyter: the `%cuguard` magic (`%load_ext cuguard`).

- `%cuguard`: what this kernel holds now, inline: per device, its contexts and the live
  allocations grouped by owner (the program, a framework's cache, a library) and site (the
  Python line, or native function, that made them; a notebook cell's line as IPython names it,
  `Cell In[2], line 5`), largest first, each with a bar of its share.
  HTML in a notebook, text in a terminal. It reads `cuguard.snapshot()`.
- `%cuguard snapshot PATH`: writes the report as it stands now to PATH.
- `%cuguard holders [--min-bytes SIZE]`: which names (module globals, a frame's locals, the
  notebook's `Out` cache) keep the most GPU memory alive: `cuguard.holders()`.

The kernel must run under the shim: a kernel spec from `cuguard jupyter install-kernel`, or
`cuguard run -- jupyter lab`. Outside it the magic says so and how to get there.
"""

import html
import shlex
import sys
from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._units import human_bytes, parse_size

_USAGE = """\
%cuguard                           what this kernel holds now (by device, owner and site)
%cuguard snapshot PATH             write the report as it stands now to PATH
%cuguard holders [--min-bytes N]   which names keep the most GPU memory alive
"""

_NOT_ACTIVE = (
    "cuguard: this kernel is not running under cuguard's shim, so there is nothing to show. "
    "Install a kernel that is (`cuguard jupyter install-kernel`, then pick \"Python 3 (cuguard)\") "
    "or start Jupyter under it (`cuguard run -- jupyter lab`)."
)

#: Rows shown per device.
_TOP = 15


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext cuguard`: registers the `%cuguard` line magic, and names the kernel's cells for
    the shim as IPython names them (`Cell In[2]`, `cuguard._cells`)."""
    ipython.register_magic_function(cuguard_magic, magic_kind="line", magic_name="cuguard")
    from . import _cells

    try:
        _cells.install(ipython)
    except Exception:  # naming cells is a nicety; the magic works without it
        pass


def unload_ipython_extension(ipython: Any) -> None:
    """Nothing to undo: the magic stays until the kernel ends."""


class _Text:
    """A display object: HTML for notebooks, plain text elsewhere."""

    def __init__(self, text: str, html_text: Optional[str] = None):
        self.text = text
        self.html_text = html_text

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text)

    def _repr_html_(self) -> Optional[str]:
        return self.html_text


def _package() -> Any:
    """This package, under whichever name it was loaded (``cuguard``, or the name cuguard's
    bootstrap gives it beside a program's own ``cuguard`` module)."""
    return sys.modules[__package__]


def cuguard_magic(line: str) -> None:
    """%cuguard [snapshot PATH | holders [--min-bytes SIZE] | help]"""
    from IPython.core.error import UsageError
    from IPython.display import display

    cuguard = _package()

    try:
        words = shlex.split(line)
    except ValueError as e:
        raise UsageError(f"%cuguard: {e}\n{_USAGE}") from None
    command = words[0] if words else ""
    try:
        if command == "":
            display(holdings_view(cuguard.snapshot(held=True), _cell_names()))
        elif command == "snapshot":
            if len(words) != 2:
                raise UsageError(f"%cuguard snapshot takes one PATH\n{_USAGE}")
            report = cuguard.snapshot(words[1])
            live = report.get("leaks") or []
            size = sum(int(a.get("size") or 0) for a in live)
            display(
                _Text(
                    f"cuguard: report written to {words[1]}: {len(live)} live allocations, "
                    f"{human_bytes(size)}"
                )
            )
        elif command == "holders":
            kwargs = {}
            rest = words[1:]
            if rest[:1] == ["--min-bytes"] and len(rest) == 2:
                try:
                    kwargs["min_bytes"] = parse_size(rest[1])
                except ValueError as e:
                    raise UsageError(f"%cuguard holders --min-bytes: {e}") from None
            elif rest:
                raise UsageError(f"%cuguard holders takes only --min-bytes SIZE\n{_USAGE}")
            display(holders_view(cuguard.holders(**kwargs)))
        elif command in ("help", "-h", "--help"):
            display(_Text(_USAGE))
        else:
            raise UsageError(f"%cuguard: unknown subcommand {command!r}\n{_USAGE}")
    except cuguard.NotActive:
        display(_Text(_NOT_ACTIVE, f"<p>{html.escape(_NOT_ACTIVE)}</p>"))


# --- what the kernel holds ----------------------------------------------------------------------

#: A file's name for people (`Cell In[2]`), or None: how a frame's file is shown.
NameOf = Callable[[str], Optional[str]]


def _cell_names() -> Optional[NameOf]:
    """This shell's names of its cells (`cuguard._cells.display_name`), when there is a shell."""
    try:
        from IPython import get_ipython

        from . import _cells
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None:
        return None
    return lambda file: _cells.display_name(shell, file)


def _frame_text(frame: Dict[str, Any], name_of: Optional[NameOf] = None) -> str:
    function = frame.get("function") or "?"
    file = frame.get("file")
    line = frame.get("line")
    display = frame.get("display") or (name_of(file) if name_of and file else None)
    if display:
        return f"{function} ({display}, line {line})" if line else f"{function} ({display})"
    if file:
        where = f"{file.rsplit('/', 1)[-1]}:{line}" if line else file
        return f"{function} ({where})"
    module = frame.get("module")
    return f"{function} ({module.rsplit('/', 1)[-1]})" if module else function


def _site_of(stack: Optional[Dict[str, Any]], name_of: Optional[NameOf] = None) -> str:
    if not stack:
        return "(no stack)"
    site = stack.get("site")
    if isinstance(site, dict):
        frames = stack.get("python" if site.get("in") == "python" else "frames") or []
        index = site.get("index")
        if isinstance(index, int) and 0 <= index < len(frames):
            return _frame_text(frames[index], name_of)
    for frame in stack.get("python") or stack.get("frames") or []:
        return _frame_text(frame, name_of)
    return "(no frame)"


class _Device:
    def __init__(self, ordinal: int):
        self.ordinal = ordinal
        self.name = ""
        self.total = 0
        self.live = 0
        self.peak = 0
        self.contexts: List[str] = []
        self.rows: Dict[Tuple[str, str], List[int]] = defaultdict(lambda: [0, 0])

    def held(self) -> int:
        return sum(size for size, _ in self.rows.values())


def _devices(report: Dict[str, Any], name_of: Optional[NameOf] = None) -> List[_Device]:
    devices: Dict[int, _Device] = {}

    def device(ordinal: Any) -> _Device:
        key = int(ordinal or 0)
        if key not in devices:
            devices[key] = _Device(key)
        return devices[key]

    for d in report.get("devices") or []:
        dev = device(d.get("ordinal"))
        dev.name = str(d.get("name") or "")
        dev.total = int(d.get("total_bytes") or 0)
    for s in (report.get("stats") or {}).get("devices") or []:
        dev = device(s.get("device"))
        dev.live = int(s.get("live_bytes") or 0)
        dev.peak = int(s.get("peak_live_bytes") or 0)
    for c in report.get("contexts") or []:
        if c.get("destroyed"):
            continue
        kind = "primary" if c.get("primary") else "created"
        device(c.get("device")).contexts.append(f"{c.get('id')} ({kind}, {c.get('handle')})")
    stacks = {s.get("id"): s for s in report.get("stacks") or []}
    labels = {o.get("id"): o.get("label") for o in report.get("owners") or []}
    view = ((report.get("python") or {}).get("view") or {}).get("allocations") or []
    classes = {v.get("address"): v for v in view}
    for a in report.get("leaks") or []:
        if a.get("state") not in (None, "live_at_exit"):
            continue
        owner = a.get("owner") or "program"
        owner_text = str(labels.get(owner) or owner)
        site = _site_of(stacks.get(a.get("stack")), name_of)
        c = classes.get(a.get("address"))
        if c is not None and c.get("class") == "cache" and c.get("blocks"):
            # Inside a cache: its live blocks at the lines that allocated them, and its idle.
            for b in c["blocks"]:
                if b.get("state") == "live":
                    frames = b.get("frames") or []
                    where = _frame_text(frames[0]) if frames else site
                    held = "held" if b.get("holders") else "live, no Python holder"
                    key = (f"{owner_text}: {held}", where)
                else:
                    key = (f"{owner_text}: idle", "(cached for reuse)")
                row = device(a.get("device")).rows[key]
                row[0] += int(b.get("size") or 0)
                row[1] += 1
            continue
        if c is not None and c.get("class") in ("held", "lost"):
            owner_text = f"{owner_text}: {c['class']}"
        row = device(a.get("device")).rows[(owner_text, site)]
        row[0] += int(a.get("size") or 0)
        row[1] += 1
    return [devices[k] for k in sorted(devices)]


def holdings_view(report: Dict[str, Any], name_of: Optional[NameOf] = None) -> _Text:
    """What the report says the process holds now, by device, owner and site (a file `name_of`
    names, a notebook cell, shown by that name)."""
    devices = _devices(report, name_of)
    process = report.get("process") or {}
    head = f"cuguard: what process {process.get('pid', '?')} holds now"
    text = [head]
    parts = [f"<div class=\"cuguard\"><p><b>{html.escape(head)}</b></p>"]
    if not devices:
        text.append("  no device memory and no context")
        parts.append("<p>No device memory and no context.</p>")
    for dev in devices:
        title = f"device {dev.ordinal}"
        if dev.name:
            title += f" — {dev.name}"
        if dev.total:
            title += f" ({human_bytes(dev.total)})"
        held = dev.held()
        line = f"{human_bytes(held)} live in {sum(n for _, n in dev.rows.values())} allocations"
        if dev.peak:
            line += f", peak {human_bytes(dev.peak)}"
        contexts = ", ".join(dev.contexts) or "none"
        text.append(f"{title}: {line}")
        text.append(f"  contexts open: {contexts}")
        parts.append(
            f"<p><b>{html.escape(title)}</b>: {html.escape(line)}<br>"
            f"contexts open: {html.escape(contexts)}</p>"
        )
        rows = sorted(dev.rows.items(), key=lambda kv: (-kv[1][0], kv[0]))
        if not rows:
            continue
        parts.append(
            "<table><thead><tr><th style=\"text-align:right\">bytes</th><th></th>"
            "<th style=\"text-align:right\">allocations</th><th>owner</th><th>site</th>"
            "</tr></thead><tbody>"
        )
        for (owner, site), (size, count) in rows[:_TOP]:
            share = size / held if held else 0.0
            text.append(f"  {human_bytes(size):>10}  {count:>5}  {owner:<28}  {site}")
            parts.append(
                f"<tr><td style=\"text-align:right\">{human_bytes(size)}</td>"
                f"<td><div style=\"background:#4c78a8;height:0.8em;width:{max(share * 120, 1):.0f}px\">"
                f"</div></td><td style=\"text-align:right\">{count}</td>"
                f"<td>{html.escape(owner)}</td><td><code>{html.escape(site)}</code></td></tr>"
            )
        if len(rows) > _TOP:
            rest = rows[_TOP:]
            size = sum(r[1][0] for r in rest)
            text.append(f"  {human_bytes(size):>10}  in {len(rest)} more rows")
            parts.append(
                f"<tr><td style=\"text-align:right\">{human_bytes(size)}</td><td></td>"
                f"<td colspan=\"3\">in {len(rest)} more rows</td></tr>"
            )
        parts.append("</tbody></table>")
    parts.append("</div>")
    return _Text("\n".join(text), "".join(parts))


# --- holders ------------------------------------------------------------------------------------


def holders_view(found: Any) -> _Text:
    """`cuguard.holders()`'s answer: its text (`cuguard.format_holders`) and, for notebooks, a
    table of each allocation's size, the path of references from a name to its holder, and where
    it was made."""
    cuguard = _package()

    text = cuguard.format_holders(found)
    rows = []
    for r in found:
        size = human_bytes(int(r.get("size") or 0))
        if r.get("path"):
            how = " → ".join(str(step) for step in r["path"])
        elif r.get("holder"):
            how = f"{r.get('unreached')}: no name reaches it"
        else:
            how = "no Python object found holding it"
        rows.append(
            f"<tr><td style=\"text-align:right\">{html.escape(size)}</td>"
            f"<td><code>{html.escape(how)}</code></td>"
            f"<td>{html.escape(str(r.get('made_at') or ''))}</td>"
            f"<td>{html.escape(str(r.get('owner') or ''))}</td></tr>"
        )
    head = html.escape(text.splitlines()[0]) if text else ""
    table = (
        f"<div class=\"cuguard\"><p><b>{head}</b></p><table><thead><tr>"
        "<th style=\"text-align:right\">bytes</th><th>held by</th><th>made at</th><th>owner</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )
    return _Text(text, table)
