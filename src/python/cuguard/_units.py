"""Sizes for people: `parse_size` reads the limits users write ("1 MiB", "2GiB", "1.5GB",
"4096"), with the units the shim's settings take, and `human_bytes` prints sizes the way the
`cuguard` command does ("1.0 MiB")."""

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
