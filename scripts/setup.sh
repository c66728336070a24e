#!/usr/bin/env bash
# One-time, idempotent set-up of pulsarcast-ipfs on this machine.
#
#   - a virtual environment in .venv with the pinned Python dependencies
#   - Kubo (ipfs) and Toxiproxy built from their pinned Go modules into .tools/bin
#   - a check that Java 17+ is there for PySpark
#   - Debian's chromium and chromium-driver for the dashboard's browser test
#     (installed with apt-get when run as root and missing)
#
# Every step is skipped when its result is already up to date, so running this
# again costs a second. Environment:
#   PULSARCAST_IPFS_BIN       use this ipfs binary instead of building Kubo
#   PULSARCAST_TOXIPROXY_BIN  use this toxiproxy-server instead of building it
#   PYTHON                    the Python (3.11+) to create the venv with
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
tools="$root/.tools"
venv="$root/.venv"
mkdir -p "$tools/bin"

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
die() { printf '\033[31m[setup] error:\033[0m %s\n' "$*" >&2; exit 1; }

hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# --- Python -----------------------------------------------------------------
python=${PYTHON:-}
if [ -z "$python" ]; then
  for c in python3.11 python3.12 python3.13 python3; do
    if command -v "$c" >/dev/null 2>&1; then python=$c; break; fi
  done
fi
[ -n "$python" ] || die "no python3 found; install Python 3.11 or newer"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "$python is $("$python" --version 2>&1); pulsarcast-ipfs needs Python 3.11 or newer"

if [ ! -x "$venv/bin/python" ]; then
  log "creating virtual environment in .venv"
  "$python" -m venv "$venv"
fi
want=$(hash_of pyproject.toml constraints.txt)
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$want" ]; then
  log "installing pinned Python dependencies (constraints.txt)"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -c constraints.txt -e '.[dev,spark]'
  if [ ! -s constraints.txt ]; then
    # First install: pin what was resolved so that later installs are reproducible.
    log "writing constraints.txt (pinned versions of every dependency)"
    "$venv/bin/python" -m pip freeze --exclude-editable > constraints.txt
    want=$(hash_of pyproject.toml constraints.txt)
  fi
  echo "$want" > "$venv/.installed"
else
  log "Python dependencies up to date"
fi

# --- Go tools ---------------------------------------------------------------
build_go_tool() { # name dir output
  local name=$1 dir=$2 out=$3
  local stamp="$out.built"
  local want
  want=$(hash_of "$dir/go.mod" "$dir/go.sum" "$dir"/*.go)
  if [ -x "$out" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    log "$name up to date ($(basename "$out"))"
    return
  fi
  command -v go >/dev/null 2>&1 || die "Go is needed to build $name (or set the *_BIN variable to an existing binary)"
  log "building $name from its pinned Go module (first time: several minutes)"
  (cd "$dir" && go build -trimpath -o "$out.tmp" .) || die "building $name failed"
  mv "$out.tmp" "$out"
  echo "$want" > "$stamp"
}

if [ -n "${PULSARCAST_IPFS_BIN:-}" ]; then
  [ -x "$PULSARCAST_IPFS_BIN" ] || die "PULSARCAST_IPFS_BIN=$PULSARCAST_IPFS_BIN is not an executable"
  log "using Kubo from PULSARCAST_IPFS_BIN: $("$PULSARCAST_IPFS_BIN" version)"
else
  build_go_tool "Kubo" tools/kubo "$tools/bin/ipfs"
fi
if [ -n "${PULSARCAST_TOXIPROXY_BIN:-}" ]; then
  [ -x "$PULSARCAST_TOXIPROXY_BIN" ] || die "PULSARCAST_TOXIPROXY_BIN=$PULSARCAST_TOXIPROXY_BIN is not an executable"
  log "using Toxiproxy from PULSARCAST_TOXIPROXY_BIN"
else
  # Toxiproxy's module installs cleanly with `go install`; its binary is named
  # `server`, so it is built into a scratch dir and renamed. Cached by version.
  toxiproxy_version=v2.5.0
  out="$tools/bin/toxiproxy-server"
  if [ -x "$out" ] && [ "$(cat "$out.built" 2>/dev/null)" = "$toxiproxy_version" ]; then
    log "Toxiproxy up to date ($toxiproxy_version)"
  else
    command -v go >/dev/null 2>&1 || die "Go is needed to build Toxiproxy (or set PULSARCAST_TOXIPROXY_BIN)"
    log "building Toxiproxy $toxiproxy_version from its Go module (about a minute)"
    scratch=$(mktemp -d)
    GOBIN="$scratch" go install "github.com/Shopify/toxiproxy/v2/cmd/server@$toxiproxy_version" \
      || { rm -rf "$scratch"; die "building Toxiproxy failed"; }
    mv "$scratch/server" "$out"
    rm -rf "$scratch"
    echo "$toxiproxy_version" > "$out.built"
  fi
fi

# --- Java for PySpark -------------------------------------------------------
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
  die "Java 17 or newer is needed for PySpark (apt-get install openjdk-17-jre-headless)"
fi
java_bin=${JAVA_HOME:+$JAVA_HOME/bin/}java
jv=$("$java_bin" -version 2>&1 | head -1 | sed -E 's/.*version "([0-9]+).*/\1/')
[ "${jv:-0}" -ge 17 ] 2>/dev/null || die "PySpark needs Java 17 or newer; found: $("$java_bin" -version 2>&1 | head -1)"
log "Java $jv found for PySpark"

# --- Chromium for the dashboard's browser test ------------------------------
# tests/test_dashboard_browser.py drives the system Chromium through chromedriver
# (selenium is a dev extra); it fails, never skips, where they are missing.
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  log "Chromium found for the browser test ($(chromium --version 2>/dev/null | head -1))"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  log "installing Debian's chromium and chromium-driver (the dashboard's browser test)"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; } >/dev/null \
    || die "apt-get install chromium chromium-driver failed"
else
  log "warning: no chromium/chromedriver, so the dashboard's browser test will fail" \
    "(as root: apt-get install chromium chromium-driver)"
fi
log "ready"
