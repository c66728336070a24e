"""How the tests start Spark's JVMs: :data:`SPARK_TEST_JVM_OPTIONS`."""

from __future__ import annotations

__all__ = ["SPARK_TEST_JVM_OPTIONS"]

SPARK_TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
"""The JVM options of the tests' Spark drivers and executors: C1 compiles, C2 never
does. A test session runs a handful of reports on a few hundred records each; C2's
compilations of Spark's generated code cost more CPU than they win back on data this
small (``tests/test_spark_measures_differential.py``: 75 s of CPU with C2, 48 s with
C1 only). Which tier compiles the code does not change what it computes."""
