"""A sidecar's ``/metrics`` read back through ``prometheus_client``'s own parser."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Scrape"]


@dataclass(frozen=True, slots=True)
class Scrape:
    """The families of one exposition, by the name the parser gives them (a
    counter's without ``_total``, as in the exposition's ``TYPE`` line)."""

    families: dict[str, Metric]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        """Parse ``text`` (``ValueError`` if it is not Prometheus' text format)."""
        return cls({m.name: m for m in text_string_to_metric_families(text)})

    def family(self, name: str) -> Metric:
        """The family ``name`` (``_total`` of a counter may be given or left off)."""
        got = self.families.get(name) or self.families.get(name.removesuffix("_total"))
        if got is None:
            raise KeyError(f"no family {name} in the scrape")
        return got

    def value(self, sample: str, **labels: str) -> float:
        """The sum of the samples named ``sample`` whose labels include ``labels``
        (0.0 if there is none): ``value("pulsarcast_rpc_bytes_total", op="EVENT")``."""
        base = sample
        for suffix in ("_bucket", "_count", "_sum"):
            if sample.endswith(suffix) and sample.removesuffix(suffix) in self.families:
                base = sample.removesuffix(suffix)
        total = 0.0
        for s in self.family(base).samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
        return total

    def label_values(self, name: str, label: str) -> set[str]:
        """Every value label ``label`` takes in family ``name``."""
        return {s.labels[label] for s in self.family(name).samples if label in s.labels}
