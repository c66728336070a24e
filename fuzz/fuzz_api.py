"""Schemathesis against a real sidecar beside one real Kubo ("bad input").

Starts a one-node local cluster with its sidecar, then runs ``schemathesis run`` on
the sidecar's ``/openapi.json``: no 5xx, every status and body as documented
(status code, content type, response schema; errors are ``{"error": {code, message}}``).
``/v1/deliveries`` follows forever by default and is excluded here; the tests check
it with ``follow=false``.

    python fuzz/fuzz_api.py --max-examples 2000          # examples per operation
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pulsarcast_ipfs.cluster import LocalSidecarCluster

CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_schema_conformance,negative_data_rejection,missing_required_header"
)


def schemathesis_command(api_url: str, max_examples: int, seed: int) -> list[str]:
    exe = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or "schemathesis"
    return [
        exe,
        "--no-color",
        "run",
        f"{api_url}/openapi.json",
        "--checks",
        CHECKS,
        "--exclude-path",
        "/v1/deliveries",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(max_examples),
        "--seed",
        str(seed),
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--suppress-health-check",
        "all",
    ]


async def run(max_examples: int, seed: int) -> tuple[int, str]:
    async with LocalSidecarCluster(nodes=1) as sc:
        cmd = schemathesis_command(sc[0].api_url, max_examples, seed)
        env = {**os.environ, "NO_COLOR": "1"}
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as cwd:  # schemathesis keeps a cache in its cwd
            proc = await anyio.run_process(
                cmd, check=False, env=env, stderr=subprocess.STDOUT, cwd=cwd
            )
        out = proc.stdout.decode(errors="replace")
        out += f"\n(schemathesis took {time.monotonic() - started:.0f} s)\n"
        return proc.returncode, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fuzz_api.py", description=__doc__.split("\n")[0])
    p.add_argument("--max-examples", type=int, default=200, help="examples per operation")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    code, out = anyio.run(run, args.max_examples, args.seed)
    print(out)
    return code


if __name__ == "__main__":
    sys.exit(main())
