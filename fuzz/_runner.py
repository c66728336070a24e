"""Command-line runner shared by ``fuzz_codec.py`` and ``fuzz_node.py``.

Two engines:

- ``atheris`` (coverage-guided, libFuzzer): seeded with the world's valid frames,
  ``-runs=N`` inputs; a failing input is written by libFuzzer as ``crash-*``.
- ``random`` (no extra dependency): valid frames, mutated frames, splices and
  garbage from a seeded ``random.Random``; a failing input is written to
  ``fuzz-failure-<kind>-<seed>-<n>.bin`` and the run stops with exit code 1.

Both print the number of inputs run and end with exit code 0 only if every
input held the property.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

Kind = Literal["codec", "node"]
STEPS = (0, 0, 0, 0, 1, 5, 20, 60, 255)
"""Time steps of the node fuzzer (0.1 s units): mostly bursts, sometimes long gaps."""


def _parser(kind: Kind) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"fuzz_{kind}.py",
        description=f"Fuzz the Pulsarcast {kind} with network input (see fuzz/README.md).",
    )
    p.add_argument("--engine", choices=("atheris", "random"), default="random")
    p.add_argument("--runs", type=int, default=100_000, help="inputs to run (default 100000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random engine and world")
    p.add_argument("--out", default=".", help="where a failing input is written")
    p.add_argument("libfuzzer_args", nargs="*", help="extra libFuzzer flags (atheris engine)")
    return p


def main(kind: Kind, argv: list[str] | None = None) -> int:
    args = _parser(kind).parse_args(argv)
    if args.runs <= 0:
        print("error: --runs must be positive", file=sys.stderr)
        return 2
    if args.engine == "atheris":
        return _atheris(kind, args.runs, args.seed, args.libfuzzer_args)
    return _random(kind, args.runs, args.seed, Path(args.out))


def _one_input(kind: Kind, seed: int) -> tuple[Callable[[bytes], None], list[bytes], object]:
    from fuzz._harness import NodeFuzzer, build_world, codec_one_input

    world = build_world(seed)
    if kind == "codec":

        def run(data: bytes) -> None:
            codec_one_input(data)

        return run, list(world.frames), None
    fz = NodeFuzzer(world, seed=seed)
    seeds = [bytes((i, 5)) + f for i, f in enumerate(world.frames)]
    return fz.one_input, seeds, fz


def _random(kind: Kind, runs: int, seed: int, out: Path) -> int:
    from fuzz._harness import FuzzFailure, NodeFuzzer, build_world, random_frames

    run, _seeds, fz = _one_input(kind, seed)
    world = build_world(seed)
    rng = random.Random(seed)
    started = time.monotonic()
    for n in range(runs):
        data = random_frames(rng, world)
        if kind == "node":
            data = bytes((rng.randrange(256), rng.choice(STEPS))) + data
        try:
            run(data)
        except FuzzFailure as exc:
            path = out / f"fuzz-failure-{kind}-{seed}-{n}.bin"
            path.write_bytes(data)
            print(f"FAILURE after {n} inputs: {exc}\ninput written to {path}", file=sys.stderr)
            return 1
        if (n + 1) % 100_000 == 0:
            rate = (n + 1) / (time.monotonic() - started)
            print(f"{kind}: {n + 1} inputs, {rate:.0f}/s", flush=True)
    elapsed = time.monotonic() - started
    summary = f"{kind}: {runs} inputs, 0 failures, {elapsed:.0f} s (engine random, seed {seed})"
    if isinstance(fz, NodeFuzzer):
        summary += (
            f"; rpcs {fz.rpcs}, stream errors {fz.remote_errors}, "
            f"disconnects {fz.disconnects}, drops {fz.dropped}"
        )
    print(summary, flush=True)
    return 0


def _atheris(kind: Kind, runs: int, seed: int, extra: list[str]) -> int:
    try:
        import atheris  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        print("error: atheris is not installed (pip install atheris)", file=sys.stderr)
        return 2
    with atheris.instrument_imports():
        import pulsarcast_ipfs.core
        import pulsarcast_ipfs.kademlia  # noqa: F401

    run, seeds, _fz = _one_input(kind, seed)
    corpus = Path(tempfile.mkdtemp(prefix=f"pulsarcast-fuzz-{kind}-"))
    for i, s in enumerate(seeds):
        (corpus / f"seed-{i:03d}").write_bytes(s)
    argv = [sys.argv[0], f"-runs={runs}", f"-seed={seed or 1}", "-max_len=4096", *extra]
    argv.append(str(corpus))
    os.environ.setdefault("PYTHONHASHSEED", "0")
    atheris.Setup(argv, run)
    atheris.Fuzz()  # exits the process: libFuzzer's exit code (0 = no crash)
    return 0
