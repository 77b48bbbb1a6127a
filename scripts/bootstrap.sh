#!/usr/bin/env bash
# Create .venv in the checkout (when missing) and install xdfs with its dev tools into it.
# Idempotent; called by `make run` and `make test`, so a fresh machine needs nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    if ! "$PYTHON" -m venv .venv 2>/dev/null; then
        # Debian splits venv out of the interpreter package.
        if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
            apt-get update -qq && apt-get install -y -qq python3-venv
            rm -rf .venv
            "$PYTHON" -m venv .venv
        else
            echo "bootstrap: '$PYTHON -m venv' failed; install python3-venv" >&2
            exit 1
        fi
    fi
fi
# pyspark (xdfs analyze, tests/analytics) runs on a JVM: Java 17 or newer.
if ! command -v java >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless
    else
        echo "bootstrap: no java on PATH; xdfs analyze and tests/analytics need Java 17+" >&2
    fi
fi
# The power-loss tests (xdfs.testing.lazyfs) mount FUSE file systems: libfuse3 and
# fusermount3. They fail with a clear message where FUSE is missing.
if ! command -v fusermount3 >/dev/null || ! ldconfig -p 2>/dev/null | grep libfuse3.so.3 >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq fuse3 libfuse3-3
    else
        echo "bootstrap: fuse3 (libfuse3, fusermount3) missing; the power-loss tests need it" >&2
    fi
fi
# `xdfs mount` is built on pyfuse3 (the dev and mount extras), compiled against libfuse3's
# headers, found with pkg-config.
if ! pkg-config --exists fuse3 2>/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq libfuse3-dev pkg-config
    else
        echo "bootstrap: libfuse3-dev and pkg-config missing; pyfuse3 (xdfs mount) needs them" >&2
    fi
fi
# Automatic failover elects the active NameNode in ZooKeeper: Debian's zookeeper package
# (the server jars; xdfs.common.zookeeper runs them with java, no service). The failover
# tests and `xdfs dev --ha` start real servers.
if [ ! -f /usr/share/java/zookeeper.jar ]; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq zookeeper
    else
        echo "bootstrap: ZooKeeper missing (Debian package zookeeper); the failover tests need it" >&2
    fi
fi
# The web UI tests (tests/ui) drive a real browser: Debian's chromium and chromium-driver,
# run headless by selenium (no browser download).
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq chromium chromium-driver
    else
        echo "bootstrap: chromium and chromium-driver missing; the web UI tests need them" >&2
    fi
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
# analytics: pyarrow, pandas, pyspark (the analytics tests run in `make test` too)
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,analytics]'
# The NameNode's hot pure modules compiled with mypyc (from the dev extra; needs a C compiler
# and the Python headers). Minutes on a small machine, so it runs in the background: until
# its manifest is written (last) the Python sources run (xdfs.common.native), and `make run`
# serves at once. `make test` and `make bench` wait for it (build_native.py --if-stale).
# Optional: a failure is reported (build/native.log) and never fatal.
if ! .venv/bin/python scripts/build_native.py --background; then
    echo "bootstrap: mypyc build not started; the NameNode runs its pure-Python modules" >&2
fi
