"""Benchmarks of the project (scripts; importable so that tests can reuse their fakes)."""
