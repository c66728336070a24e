#!/usr/bin/env bash
# Build one Kubo release from its Go module into .tools/kubo/<version>/ipfs, for the
# Kubo matrix (README.md "Supported Kubo versions", tests/test_kubo_matrix.py).
#
#   bash scripts/build-kubo.sh v0.42.0
#
# Like tools/kubo (the pinned Kubo): a scratch module with tools/kubo/main.go (Kubo's
# own main, unchanged) requires the release with the release's own `exclude` and
# `replace` directives, which `go install module@version` refuses. Skipped when the
# binary is there already.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=${1:-}
if [ "$version" = -h ] || [ "$version" = --help ]; then
  sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 0
fi
if ! [[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "build-kubo: expected a Kubo release like v0.42.0, got '$version' (--help)" >&2
  exit 2
fi
out="$root/.tools/kubo/$version"
if [ -x "$out/ipfs" ]; then
  echo "[build-kubo] $version up to date ($out/ipfs)"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "build-kubo: Go is needed" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"; rmdir "$out" 2>/dev/null || true' EXIT
cp "$root/tools/kubo/main.go" "$scratch/main.go"
cd "$scratch"
go mod init pulsarcast-ipfs/tools/kubo-matrix >/dev/null 2>&1
gomod=$(go mod download -json "github.com/ipfs/kubo@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[ -f "$gomod" ] || { echo "build-kubo: the Go module proxy has no github.com/ipfs/kubo@$version" >&2; exit 1; }
goversion=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")
[ -n "$goversion" ] && go mod edit -go="$goversion"
# The release's exclude and replace directives (single-line and block forms).
awk '
  /^(exclude|replace) \(/ { block=$1; next }
  block && /^\)/ { block=""; next }
  block { print block, $0; next }
  /^(exclude|replace) [^(]/ { print }
' "$gomod" | while read -r kind rest; do
  case "$kind" in
    exclude) go mod edit -exclude="$(echo "$rest" | awk '{print $1"@"$2}')" ;;
    replace)
      lhs=$(echo "$rest" | sed 's/ *=>.*//' | awk '{print $1 ($2 ? "@"$2 : "")}')
      rhs=$(echo "$rest" | sed 's/.*=> *//' | awk '{print $1 ($2 ? "@"$2 : "")}')
      case "$rhs" in ./*|../*) continue ;; esac  # a path inside Kubo's repository
      go mod edit -replace="$lhs=$rhs" ;;
  esac
done
go get "github.com/ipfs/kubo/cmd/ipfs/kubo@$version" >/dev/null 2>&1 \
  || go get "github.com/ipfs/kubo/cmd/ipfs/kubo@$version"
# (no `go mod tidy`: it pulls test-only dependencies of dependencies, among them the
# pre-split google.golang.org/genproto, which makes imports ambiguous)
echo "[build-kubo] building Kubo $version (first time: several minutes)"
mkdir -p "$out"
go build -trimpath -o "$out/ipfs.tmp" .
mv "$out/ipfs.tmp" "$out/ipfs"
"$out/ipfs" version
