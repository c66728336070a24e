"""Fuzz a PulsarcastNode with RPCs from the network (docs/protocol.md §5, §6).

Each input is one connection from one of nine peers, after a time step: the frames
decoded from it go to ``receive_rpc``; due timers fire; fetches are answered from a
world of real blocks. Property: the decoder raises only ``RemoteProtocolError``,
the node raises nothing (garbage is dropped with an ``event_dropped`` record), its
outputs are well formed and its bounded structures and trees stay consistent.

    python fuzz/fuzz_node.py --runs 1000000                  # seeded random mutation
    python fuzz/fuzz_node.py --engine atheris --runs 1000000 # coverage-guided
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fuzz._runner import main

if __name__ == "__main__":
    sys.exit(main("node"))
