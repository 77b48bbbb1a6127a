"""The pure parsers of the shell: symbolic -chmod modes and quota sizes."""

from __future__ import annotations

import pytest

from xdfs.cli.dfs_modes import parse_mode
from xdfs.cli.format import parse_size


@pytest.mark.parametrize(("text", "old", "is_dir", "new"), [
    ("755", 0o600, False, 0o755),
    ("1777", 0o755, True, 0o1777),
    ("u+x", 0o644, False, 0o744),
    ("go-w", 0o666, False, 0o644),
    ("u+x,go-w", 0o666, False, 0o744),
    ("a=r", 0o777, False, 0o444),
    ("=r", 0o777, False, 0o444),  # no class: all of them
    ("+x", 0o644, False, 0o755),
    ("a+X", 0o644, False, 0o644),  # X: a file nobody executes stays so
    ("a+X", 0o744, False, 0o755),
    ("a+X", 0o600, True, 0o711),
    ("+t", 0o777, True, 0o1777),
    ("o=rx", 0o1777, True, 0o775),  # = on "o" clears the sticky bit
    ("u=rwx,g=rx,o=", 0o000, False, 0o750),
])
def test_symbolic_modes_as_hdfs(text: str, old: int, is_dir: bool, new: int) -> None:
    assert parse_mode(text)(old, is_dir) == new


# "g+w-x": one operator per clause (hdfs would read "-x" as "a-x"; refused rather than
# guessed)
@pytest.mark.parametrize("text", ["", "u+q", "x+r", "888", "u+r,", "12345", "u", "g+w-x"])
def test_bad_modes_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_mode(text)


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("123", 123), ("1k", 1024), ("1K", 1024), ("10m", 10 << 20), ("1.5g", 3 << 29),
    ("2t", 2 << 40), ("1e", 1 << 60),
])
def test_sizes_with_binary_prefixes(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "-1", "1x", "k", "nan", "1.2.3", "8e"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)
