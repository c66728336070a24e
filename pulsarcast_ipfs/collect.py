"""Collect metric records from many sidecars into one Parquet dataset.

Theory of operation
-------------------
Every sidecar serves its records page by page at ``GET /v1/records`` with a cursor
(docs/http-api.md "Metric records"). :class:`Collector` asks each source first for
an empty page (``limit=0``) to learn its ``run`` and ``node``, then pages on from the
cursor it remembered for that ``(run, node)`` in ``OUT/_collect_state.json``: the
cursor belongs to the records, not to the address, so a sidecar that comes back on
another port resumes where it left off.

Records are written as Parquet files under ``OUT/run=<run>/node=<node>/``, one
column per field of the record schema (:data:`pulsarcast_ipfs.records.FIELDS`), the
``run`` and ``node`` columns kept in the files too. A part file is named after the
cursor its first record was read from and written before the state remembers the
cursor after its last one: a run stopped in between reads the same records again
and writes them to the same name, replacing the file, so a re-run never duplicates
a record. A record that does not fit the schema's columns (an unknown field, a
value of another type, a record the schema refuses) is kept, as its JSON line, in
a ``.jsonl`` file of the same name beside the part, where the report counts it as
rejected: nothing is dropped.
Names starting with ``_`` or ``.`` (the state, files being written) are hidden from
Spark's reader.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

import httpx

from pulsarcast_ipfs.records import COMMON_FIELDS, FIELDS, RecordError, validate_record

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["STATE_FILE", "CollectError", "Collector", "SourceResult", "arrow_schema"]

STATE_FILE: Final = "_collect_state.json"
PAGE_LIMIT: Final = 5000
PART_RECORDS: Final = 200_000


class CollectError(Exception):
    """A source or the output directory that cannot be used (one line for the user)."""


def arrow_schema() -> pa.Schema:
    """One nullable column per field of any record kind, in schema order."""
    import pyarrow as pa

    kinds = {
        "string": pa.string(),
        "integer": pa.int64(),
        "number": pa.float64(),
        "boolean": pa.bool_(),
        "array": pa.list_(pa.string()),
        "object": pa.map_(pa.string(), pa.map_(pa.string(), pa.int64())),
    }
    cols: dict[str, pa.DataType] = {}
    for fields in (COMMON_FIELDS, *FIELDS.values()):
        for name, (types, _required) in fields.items():
            cols.setdefault(name, kinds[next(t for t in types if t != "null")])
    return pa.schema([pa.field(n, t) for n, t in cols.items()])


@dataclass(slots=True)
class SourceResult:
    """What one source gave."""

    url: str
    run: str = ""
    node: str = ""
    records: int = 0
    kept_as_json: int = 0
    error: str | None = None
    seconds: float = 0.0


@dataclass(slots=True)
class _State:
    path: Path
    cursors: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, out: Path) -> _State:
        path = out / STATE_FILE
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            cursors = doc["sources"]
            if not isinstance(cursors, dict):
                raise TypeError("sources is not an object")
        except FileNotFoundError:
            return cls(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CollectError(f"unreadable collect state {path}: {exc}") from None
        return cls(path, cursors)

    def save(self) -> None:
        tmp = self.path.with_name("." + self.path.name + ".tmp")
        tmp.write_text(json.dumps({"version": 1, "sources": self.cursors}, indent=1))
        os.replace(tmp, self.path)


class Collector:
    """Pulls records from sidecars into ``out`` (see the module docstring)."""

    def __init__(
        self,
        out: Path,
        *,
        token: str | None = None,
        page_limit: int = PAGE_LIMIT,
        part_records: int = PART_RECORDS,
        timeout: float = 30.0,
        progress: Callable[[str], None] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError as exc:
            raise CollectError(
                f"collect needs pyarrow (pip install 'pulsarcast-ipfs[spark]'): {exc}"
            ) from None
        self.out = out
        self.token = token
        self.page_limit = page_limit
        self.part_records = part_records
        self.timeout = timeout
        self.progress = progress or (lambda _msg: None)
        self.transport = transport
        self.schema = arrow_schema()
        self._columns = set(self.schema.names)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CollectError(f"cannot create {out}: {exc}") from None
        self.state = _State.load(out)

    def collect(self, urls: Iterable[str]) -> list[SourceResult]:
        """Every source in turn; a source that fails is reported, the others go on."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        results: list[SourceResult] = []
        with httpx.Client(headers=headers, timeout=self.timeout, transport=self.transport) as http:
            for url in urls:
                res = SourceResult(url=url)
                started = time.monotonic()
                try:
                    self._source(http, res)
                except CollectError as exc:
                    res.error = str(exc)
                except httpx.HTTPError as exc:
                    res.error = f"cannot reach {url}: {exc or type(exc).__name__}"
                res.seconds = time.monotonic() - started
                results.append(res)
        return results

    def _page(self, http: httpx.Client, url: str, params: dict[str, Any]) -> dict[str, Any]:
        resp = http.get(f"{url}/v1/records", params=params)
        try:
            doc = resp.json()
        except ValueError:
            doc = None
        if resp.status_code != 200:
            err = doc.get("error") if isinstance(doc, dict) else None
            if isinstance(err, dict):
                raise CollectError(f"{url}: {err.get('code')}: {err.get('message')}")
            raise CollectError(f"{url}: HTTP {resp.status_code} (is this a pulsarcast sidecar?)")
        if not (
            isinstance(doc, dict)
            and isinstance(doc.get("records"), list)
            and all(isinstance(doc.get(k), str) for k in ("run", "node", "next"))
        ):
            raise CollectError(f"{url}: not a record page (is this a pulsarcast sidecar?)")
        return doc

    def _source(self, http: httpx.Client, res: SourceResult) -> None:
        first = self._page(http, res.url, {"limit": 0})
        res.run, res.node = first["run"], first["node"]
        key = f"{res.run}/{res.node}"
        saved = self.state.cursors.get(key, {})
        cursor: str | None = saved.get("cursor")
        part_dir = self.out / f"run={quote(res.run, safe='')}" / f"node={quote(res.node, safe='')}"
        batch: list[dict[str, Any]] = []
        batch_start = cursor
        while True:
            params: dict[str, Any] = {"limit": self.page_limit}
            if cursor:
                params["after"] = cursor
            page = self._page(http, res.url, params)
            if (page["run"], page["node"]) != (res.run, res.node):
                raise CollectError(f"{res.url}: the sidecar changed run or node while collecting")
            batch.extend(r for r in page["records"] if isinstance(r, dict))
            cursor = page["next"]
            more = bool(page.get("more"))
            if batch and (len(batch) >= self.part_records or not more):
                res.kept_as_json += self._write_part(part_dir, batch_start, batch)
                res.records += len(batch)
                self.state.cursors[key] = {
                    "cursor": cursor,
                    "records": int(saved.get("records", 0)) + res.records,
                }
                self.state.save()
                self.progress(f"{res.node[-8:]} ({res.run}): {res.records:,} records")
                batch, batch_start = [], cursor
            if not more:
                break
        if key not in self.state.cursors:
            self.state.cursors[key] = {"cursor": cursor, "records": 0}
            self.state.save()

    def _write_part(self, part_dir: Path, start: str | None, rows: list[dict[str, Any]]) -> int:
        """Write ``rows`` as the part named after ``start``; the number kept as JSON."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        part_dir.mkdir(parents=True, exist_ok=True)
        name = "part-" + (start or "start").replace(":", "-")
        fits: list[dict[str, Any]] = []
        others: list[dict[str, Any]] = []
        for r in rows:
            (fits if self._fits(r) else others).append(r)
        try:
            table = pa.Table.from_pylist(fits, schema=self.schema)
        except (pa.ArrowException, TypeError, ValueError):
            table, fits = self._rows_that_fit(fits, others)
        json_path = part_dir / f"{name}.jsonl"
        if others:
            tmp = part_dir / f".{name}.jsonl.tmp"
            tmp.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in others))
            os.replace(tmp, json_path)
        else:
            json_path.unlink(missing_ok=True)
        tmp = part_dir / f".{name}.parquet.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, part_dir / f"{name}.parquet")
        return len(others)

    def _fits(self, row: dict[str, Any]) -> bool:
        """A valid record (pyarrow would cut 1.5 to 1 in an integer column) whose
        fields all have a column."""
        try:
            validate_record(row)
        except RecordError:
            return False
        return row.keys() <= self._columns

    def _rows_that_fit(
        self, rows: list[dict[str, Any]], others: list[dict[str, Any]]
    ) -> tuple[pa.Table, list[dict[str, Any]]]:
        """Row by row: those that convert; the rest go to ``others``."""
        import pyarrow as pa

        fits = []
        for r in rows:
            try:
                pa.Table.from_pylist([r], schema=self.schema)
            except (pa.ArrowException, TypeError, ValueError):
                others.append(r)
            else:
                fits.append(r)
        return pa.Table.from_pylist(fits, schema=self.schema), fits
