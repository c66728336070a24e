"""Fuzz the RPC codec and the descriptor decoder (docs/protocol.md §4, §6).

Property: ``FrameDecoder.feed`` (whole and byte by byte) and ``decode_descriptor``
raise only ``RemoteProtocolError``; both feeding ways decode the same messages;
decoded messages and descriptors are canonical (re-encode to the same bytes).

    python fuzz/fuzz_codec.py --runs 1000000                  # seeded random mutation
    python fuzz/fuzz_codec.py --engine atheris --runs 1000000 # coverage-guided
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuzz._runner import main

if __name__ == "__main__":
    sys.exit(main("codec"))
