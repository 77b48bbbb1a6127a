from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from xdfs.config import (
    XdfsConfig,
    config_as_toml,
    config_reference_markdown,
    load_config,
    parse_overrides,
)
from xdfs.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_carry_units_and_validate() -> None:
    config = load_config(env={})
    assert config == XdfsConfig()
    assert config.rpc.frame_bytes_max == 4 * 1024 * 1024
    assert config.rpc.tries_per_address == 3


def test_toml_file_then_env_then_overrides(tmp_path: Path) -> None:
    conf = tmp_path / "xdfs.toml"
    conf.write_text('[rpc]\ncall_timeout_s = 7.5\n[client]\nfs = "xdfs://a:1"\nuser = "file"\n')
    env = {"XDFS_CONF": str(conf), "XDFS_USER": "envuser"}
    config = load_config(None, ["rpc.call_timeout_s=2", "client.fs=xdfs://b:2"], env=env)
    assert config.rpc.call_timeout_s == 2.0
    assert config.client.fs == "xdfs://b:2"
    assert config.client.user == "envuser"  # environment beats the file


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[nosuch]\nx = 1\n", "unknown config section"),
        ("[rpc]\nnosuch_key = 1\n", "unknown config key rpc.nosuch_key"),
        ('[rpc]\nframe_bytes_max = "big"\n', "config [rpc]"),
        ("[rpc]\nframe_bytes_max = 1024\n", "frame_bytes_max must be >= 64 KiB"),
        ("[rpc]\nstream_chunk_bytes = 4194304\n", "stream_chunk_bytes"),
        ('[rpc]\ntls_cert_file = "c.pem"\n', "go together"),
        ("rpc = 3\n", "must be a table"),
        ("not toml ===", "config file"),
    ],
)
def test_bad_configuration_is_a_clear_error(tmp_path: Path, toml: str, message: str) -> None:
    conf = tmp_path / "bad.toml"
    conf.write_text(toml)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(conf, env={})


def test_missing_file_and_bad_override() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent/xdfs.toml", env={})
    with pytest.raises(ConfigError, match=r"section\.key=value"):
        parse_overrides(["justakey"])


def test_effective_config_roundtrips_through_toml(tmp_path: Path) -> None:
    config = load_config(None, ["rpc.connect_timeout_s=1.5"], env={})
    conf = tmp_path / "effective.toml"
    conf.write_text(config_as_toml(config))
    assert load_config(conf, env={}) == config


def test_configuration_doc_lists_every_key() -> None:
    """docs/configuration.md embeds the generated reference verbatim: regenerate with
    `xdfs conf --markdown` whenever a key changes."""
    doc = (ROOT / "docs" / "configuration.md").read_text()
    assert config_reference_markdown() in doc


def _run_xdfs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xdfs", *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_cli_conf_prints_effective_configuration() -> None:
    result = _run_xdfs("-D", "rpc.call_timeout_s=9", "conf")
    assert result.returncode == 0, result.stderr
    assert "call_timeout_s = 9.0" in result.stdout
    bad = _run_xdfs("-D", "rpc.bogus=1", "conf")
    assert bad.returncode == 1
    assert "unknown config key rpc.bogus" in bad.stderr


def test_cli_help_lists_subcommands_and_version() -> None:
    result = _run_xdfs("--help")
    assert result.returncode == 0
    for name in ("namenode", "datanode", "backupnode", "dfs", "admin", "fsck", "oiv", "oev",
                 "dev", "conf"):
        assert f"  {name}" in result.stdout
    version = _run_xdfs("--version")
    assert version.returncode == 0 and "xdfs, version" in version.stdout


def test_cli_import_stays_light() -> None:
    """`xdfs --help` must not import heavy or server modules."""
    code = (
        "import sys; from xdfs.cli.main import cli\n"
        "try:\n    cli(['--help'], prog_name='xdfs')\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('pyspark', 'pyarrow', 'pandas', 'numpy', 'kazoo') or m.startswith('xdfs.namenode')"
        " or m.startswith('xdfs.datanode') or m.startswith('xdfs.rpc')]\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert "HEAVY []" in result.stdout, result.stdout + result.stderr
