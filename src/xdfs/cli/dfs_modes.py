"""``-chmod`` modes as ``hdfs dfs`` takes them: octal (``755``, ``1777``) or symbolic
(``u+x,go-w``, ``a=rX``, ``+t``), as HDFS's ChmodParser: clauses ``[ugoa]*[+-=][rwxXt]*``
separated by commas; no ``ugoa`` means all three; ``X`` is execute for directories and for
files that some class may already execute; ``t`` is the sticky bit."""

from __future__ import annotations

import re
from collections.abc import Callable

_CLAUSE = re.compile(r"([ugoa]*)([-+=])([rwxXt]*)")
_SHIFT = {"u": 6, "g": 3, "o": 0}
_BITS = {"r": 4, "w": 2, "x": 1}
STICKY = 0o1000

#: A parsed mode: the new mode from (old mode, is a directory).
ModeChange = Callable[[int, bool], int]


def parse_mode(text: str) -> ModeChange:
    """ValueError when ``text`` is neither an octal mode nor symbolic clauses."""
    if re.fullmatch(r"[0-7]{1,4}", text):
        octal = int(text, 8)
        return lambda _old, _is_dir: octal
    clauses = text.split(",")
    parsed = [_CLAUSE.fullmatch(clause) for clause in clauses]
    if not clauses or any(found is None for found in parsed):
        raise ValueError(f"chmod: {text}: not an octal or symbolic mode")
    steps = [(found[1] or "ugo", found[2], found[3]) for found in parsed if found is not None]

    def change(old: int, is_dir: bool) -> int:
        mode = old
        for who, op, what in steps:
            mode = _apply(mode, is_dir, who.replace("a", "ugo"), op, what)
        return mode

    return change


def _apply(mode: int, is_dir: bool, who: str, op: str, what: str) -> int:
    executable = is_dir or bool(mode & 0o111)
    bits = 0
    for letter in what:
        if letter == "t":
            continue
        value = 1 if letter == "X" and executable else _BITS.get(letter, 0)
        for cls in set(who):
            bits |= value << _SHIFT[cls]
    sticky = STICKY if "t" in what else 0
    mask = sum(0o7 << _SHIFT[cls] for cls in set(who)) | (STICKY if "o" in who else 0)
    if op == "+":
        return mode | bits | sticky
    if op == "-":
        return mode & ~(bits | sticky)
    return (mode & ~mask) | bits | sticky
