"""Spark session defaults and the report CLI's out-of-memory message (no JVM started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsarcast_ipfs._report_job import out_of_memory
from pulsarcast_ipfs.cli import main as cli_main
from spark._session import default_driver_memory


@pytest.mark.parametrize(
    ("physical_gib", "expected"),
    [(4, "2g"), (8, "2g"), (16, "4g"), (24, "6g"), (32, "8g"), (256, "8g")],
)
def test_driver_memory_is_a_quarter_of_the_machine_within_2_to_8_gib(
    physical_gib: int, expected: str
) -> None:
    assert default_driver_memory(physical_gib * 2**30) == expected


def test_driver_memory_of_this_machine_is_a_spark_size() -> None:
    size = default_driver_memory()
    assert size.endswith("g") and 2 <= int(size[:-1]) <= 8


def test_out_of_memory_is_recognised_in_a_py4j_message() -> None:
    class Py4JJavaError(Exception):
        pass

    assert out_of_memory(
        Py4JJavaError("An error occurred: java.lang.OutOfMemoryError: Java heap space")
    )
    assert out_of_memory(RuntimeError("Java heap space"))
    assert not out_of_memory(RuntimeError("Path does not exist: file:/nowhere"))


def test_report_refuses_a_malformed_driver_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rc = cli_main(["report", str(run), "--out", str(tmp_path / "o"), "--driver-memory", "lots"])
    assert rc == 1
    assert "--driver-memory: expected a size such as 4g" in capsys.readouterr().err
