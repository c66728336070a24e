"""``pulsarcast-sidecar``: placeholder until the sidecar issue lands."""

from __future__ import annotations

import sys


def main() -> int:
    print("pulsarcast-sidecar: not implemented yet", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
