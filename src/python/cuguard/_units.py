"""Sizes and names for people: `parse_size` reads the limits users write ("1 MiB", "2GiB",
"1.5GB", "4096"), with the units the shim's settings take, `human_bytes` prints sizes the way the
`cuguard` command does ("1.0 MiB"), and `escaped` makes a name from the program (a frame's
function or file, a driver entry) safe to print, escaped as the command escapes it."""

import math
import re
from typing import Union

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_size(value: Union[str, int]) -> int:
    """Bytes in `value`: an int, or a number with an optional unit (B; kB, MB, GB, TB in powers
    of 1000; KiB, MiB, GiB, TiB in powers of 1024; case does not matter). Raises `ValueError`
    saying what is wrong."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value!r} is negative")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a size (give a string such as \"1 MiB\", or bytes)")
    match = _SIZE.match(value)
    if match is None:
        raise ValueError(f"{value!r} is not a size (write e.g. \"512 KiB\", \"1 MiB\", \"2GB\" or \"4096\")")
    number, unit = match.groups()
    multiplier = _UNITS.get(unit.lower())
    if multiplier is None:
        raise ValueError(
            f"{value!r} has an unknown unit {unit!r} (use B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)"
        )
    result = float(number) * multiplier
    if not math.isfinite(result) or result >= 2**64:
        raise ValueError(f"{value!r} is out of range")
    return int(result)


def human_bytes(n: int) -> str:
    """`n` bytes as the `cuguard` command prints them: "1023 B", "1.5 KiB", "3.0 MiB"."""
    if n < 1024:
        return f"{n} B"
    units = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    value = n / 1024.0
    unit = 0
    while value >= 1024.0 and unit + 1 < len(units):
        value /= 1024.0
        unit += 1
    return f"{value:.1f} {units[unit]}"


def needs_escape(c: str) -> bool:
    """Whether the character `c` must be escaped before it reaches a terminal or a log: control
    characters (C0, DEL and C1, NEL among them), the line and paragraph separators (U+2028,
    U+2029) and the characters that reorder text (bidirectional marks, overrides, embeddings and
    isolates).

    The same set as `cuguard_format::needs_escape` (shim/format/src/units.rs), the one rule of the
    shim and the command: change both together (`test_escaped_is_the_commands_rule` and the Rust
    test `every_character_of_the_rule` check the same text)."""
    o = ord(c)
    return (
        o < 0x20
        or 0x7F <= o <= 0x9F
        or o in (0x061C, 0x200E, 0x200F, 0x2028, 0x2029)
        or 0x202A <= o <= 0x202E
        or 0x2066 <= o <= 0x2069
    )


_SHORT_ESCAPES = {"\t": "\\t", "\r": "\\r", "\n": "\\n"}


def escaped(text: str) -> str:
    """`text` with every character `needs_escape` names written as the command writes it (Rust's
    `escape_default`): `\\n`, `\\t`, `\\r`, else `\\u{1b}` (lowercase hex)."""
    if not any(needs_escape(c) for c in text):
        return text
    return "".join(
        (_SHORT_ESCAPES.get(c) or f"\\u{{{ord(c):x}}}") if needs_escape(c) else c for c in text
    )
