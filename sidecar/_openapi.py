"""The OpenAPI 3.1 description of the sidecar's API (kept equal to docs/http-api.md by a test).

Its error responses are generated from the table of :mod:`pulsarcast_ipfs.api_errors`.
"""

from __future__ import annotations

from typing import Any

from pulsarcast_ipfs.api_errors import ERROR_CODES

__all__ = ["ENDPOINTS", "openapi_document"]

ENDPOINTS: tuple[tuple[str, str, str], ...] = (
    ("get", "/health", "Sidecar and Kubo health"),
    ("get", "/v1/status", "Peer ID, versions, topics with their tree neighbours"),
    ("post", "/v1/topics", "Create a topic (or a sub-topic / new version with parent)"),
    ("get", "/v1/topics/{cid}", "A topic descriptor (fetched from IPFS if not local)"),
    ("post", "/v1/topics/{cid}/update", "Publish a new version of a topic on its meta topic"),
    ("post", "/v1/topics/{cid}/subscribe", "Subscribe this node"),
    ("post", "/v1/topics/{cid}/unsubscribe", "Drop this node's explicit subscription"),
    ("post", "/v1/topics/{cid}/consumers", "Open a consumer: its own filter and cursor"),
    ("get", "/v1/consumers", "Every consumer of this sidecar"),
    ("get", "/v1/consumers/{id}", "One consumer"),
    ("delete", "/v1/consumers/{id}", "Close a consumer"),
    ("post", "/v1/topics/{cid}/publish", "Publish an event (or request to publish)"),
    ("get", "/v1/topics/{cid}/history", "History in (clock, CID) order, cursor = event CID"),
    ("get", "/v1/events/{cid}", "An event descriptor (from any node, by CID)"),
    ("get", "/v1/deliveries", "NDJSON stream of deliveries, resumable by seq"),
    ("get", "/v1/records", "A page of this sidecar's metric records, after a cursor"),
    ("get", "/metrics", "Prometheus text metrics"),
    ("get", "/openapi.json", "This document"),
)

_PEER_POLICY = {
    "type": "object",
    "properties": {
        "enabled": {"type": "boolean"},
        "peers": {"type": "array", "items": {"type": "string"}},
    },
}
_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"enum": sorted({e.code for e in ERROR_CODES})},
                "message": {"type": "string"},
            },
        }
    },
}
_TOPIC = {
    "type": "object",
    "properties": {
        k: {"type": t}
        for k, t in {
            "cid": "string",
            "root_cid": "string",
            "name": "string",
            "author": "string",
            "parent": ["string", "null"],
            "sub_topics": "object",
            "created": "string",
            "protocol_version": "string",
            "allowed_publishers": "object",
            "request_to_publish": "object",
            "event_linking": "string",
            "latest": "string",
        }.items()
    },
}
_EVENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "cid": {"type": "string"},
        "topic": {"type": "string"},
        "author": {"type": "string"},
        "publisher": {"type": "string"},
        "parents": {"type": "array", "items": {"type": "string"}, "maxItems": 16},
        "clock": {"type": "integer", "minimum": 0},
        "created": {"type": "string"},
        "protocol_version": {"type": "string"},
        "payload": {"type": "string"},
        "attributes": {"$ref": "#/components/schemas/Attributes"},
    },
}
_ATTRIBUTES = {
    "type": "object",
    "description": "at most 16 names [A-Za-z_][A-Za-z0-9_]* (1-32 characters, not and/in/"
    "between) to a string (at most 256 characters) or a finite number (docs/http-api.md "
    '"Attributes and filters")',
    "maxProperties": 16,
    "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]{0,31}$"},
    "additionalProperties": {"type": ["string", "number"]},
}
_HISTORY_PAGE = {
    "type": "object",
    "required": ["events", "next", "complete", "missing", "heads", "retained", "order"],
    "properties": {
        "events": {"type": "array", "items": {"$ref": "#/components/schemas/Event"}},
        "next": {"type": ["string", "null"]},
        "complete": {"type": "boolean"},
        "missing": {"type": "array", "items": {"type": "string"}},
        "heads": {"type": "array", "items": {"type": "string"}},
        "retained": {"type": "integer", "minimum": 0},
        "order": {"enum": ["newest", "oldest"]},
    },
}
_DELIVERY = {
    "allOf": [
        {"$ref": "#/components/schemas/Event"},
        {
            "type": "object",
            "properties": {
                "seq": {"type": "integer"},
                "topic_root": {"type": "string"},
                "topic_name": {"type": "string"},
                "recovered": {"type": "boolean"},
                "delivered_at": {"type": "number"},
            },
        },
    ]
}
_TOPIC_OPTIONS = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "parent": {"type": "string"},
        "allowed_publishers": {"$ref": "#/components/schemas/PeerPolicy"},
        "request_to_publish": {"$ref": "#/components/schemas/PeerPolicy"},
        "event_linking": {"enum": ["LAST_SEEN", "CUSTOM"]},
    },
}
_PUBLISH = {
    "type": "object",
    "properties": {
        "payload": {"type": "string", "contentEncoding": "base64"},
        "text": {"type": "string"},
        "parent": {"type": "string"},
        "inject_id": {"type": "string"},
        "attributes": {"$ref": "#/components/schemas/Attributes"},
        "ack": {
            "oneOf": [{"const": "local"}, {"type": "integer", "minimum": 1, "maximum": 64}],
            "description": "other nodes that must hold the event before the answer "
            "(default 1); local: answered once it is in this node",
        },
        "ack_timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": 300},
        "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 200},
    },
}


_SUBSCRIBE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "fast": {
            "type": "boolean",
            "description": "also join the fast group of each publisher of the topic",
        },
        "filter": {
            "type": "string",
            "maxLength": 4096,
            "description": "deliver only the events it matches, e.g. "
            '"ups >= 10 and controversiality = 1" (docs/http-api.md "Filters")',
        },
    },
}


_OPEN_CONSUMER = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "filter": {
            "type": "string",
            "maxLength": 4096,
            "description": "this consumer gets only the events it matches",
        },
        "name": {
            "type": "string",
            "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
            "description": "a durable consumer: taken up again by name, with its cursor",
        },
        "fast": {"type": "boolean"},
        "after": {"type": "integer", "minimum": 0, "description": "start after this seq"},
    },
}
_CONSUMER = {
    "type": "object",
    "required": ["id", "topic", "filter", "cursor"],
    "properties": {
        "id": {"type": "string"},
        "name": {"type": ["string", "null"]},
        "durable": {"type": "boolean"},
        "topic": {"type": "string"},
        "filter": {"type": ["string", "null"]},
        "fast": {"type": "boolean"},
        "cursor": {"type": "integer", "minimum": 0},
        "streams": {"type": "integer", "minimum": 0},
        "idle_since": {"type": ["number", "null"]},
        "expires": {"type": ["number", "null"]},
    },
}


_RECORD_PAGE: dict[str, Any] = {
    "type": "object",
    "required": ["run", "node", "next", "more", "records"],
    "properties": {
        "run": {"type": "string"},
        "node": {"type": "string"},
        "next": {"type": "string"},
        "more": {"type": "boolean"},
        "records": {
            "type": "array",
            "items": {"type": "object", "description": "a metric record (docs/metrics.md)"},
        },
    },
}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _error_responses() -> dict[str, Any]:
    """One response per error status of the table, naming its codes."""
    out: dict[str, Any] = {}
    for status in sorted({e.status for e in ERROR_CODES}):
        rows = [e for e in ERROR_CODES if e.status == status]
        code_schema = {"enum": [e.code for e in rows]}
        out[str(status)] = {
            "description": "; ".join(f"`{e.code}`: {e.meaning}" for e in rows),
            "content": {
                "application/json": {
                    "schema": {
                        "allOf": [
                            _ref("Error"),
                            {"properties": {"error": {"properties": {"code": code_schema}}}},
                        ]
                    }
                }
            },
        }
    return out


def _op(method: str, path: str, summary: str) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {}}
    params: list[dict[str, Any]] = []
    if "{cid}" in path:
        params.append({"name": "cid", "in": "path", "required": True, "schema": {"type": "string"}})
    if "{id}" in path:
        params.append({"name": "id", "in": "path", "required": True, "schema": {"type": "string"}})
    ok = (
        "201" if path.endswith(("/topics", "/update", "/consumers")) and method == "post" else "200"
    )
    schema: dict[str, Any] = {"type": "object"}
    if path in ("/v1/topics", "/v1/topics/{cid}", "/v1/topics/{cid}/update"):
        schema = _ref("Topic")
    elif path == "/v1/events/{cid}":
        schema = _ref("Event")
    elif path.endswith("/history"):
        schema = _ref("HistoryPage")
    elif path == "/v1/topics/{cid}/consumers" or (path == "/v1/consumers/{id}" and method == "get"):
        schema = _ref("Consumer")
    elif path == "/v1/consumers":
        schema = {
            "type": "object",
            "properties": {"consumers": {"type": "array", "items": _ref("Consumer")}},
        }
    if path == "/v1/topics/{cid}/consumers":
        op["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": _ref("OpenConsumer")}},
        }
    if path in ("/v1/topics", "/v1/topics/{cid}/update"):
        op["requestBody"] = {"content": {"application/json": {"schema": _ref("TopicOptions")}}}
    if path.endswith("/publish"):
        op["requestBody"] = {"content": {"application/json": {"schema": _ref("Publish")}}}
    if path.endswith("/subscribe"):
        op["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": _ref("Subscribe")}},
        }
    if path.endswith("/history"):
        params += [
            {"name": "order", "in": "query", "schema": {"enum": ["newest", "oldest"]}},
            {"name": "after", "in": "query", "schema": {"type": "string"}},
            {
                "name": "before",
                "in": "query",
                "deprecated": True,
                "description": "old name of after= (order=newest only)",
                "schema": {"type": "string"},
            },
            {
                "name": "limit",
                "in": "query",
                "schema": {"type": "integer", "minimum": 1, "maximum": 500},
            },
            {
                "name": "where",
                "in": "query",
                "description": 'only the events this filter matches (docs/http-api.md "Filters")',
                "schema": {"type": "string", "maxLength": 4096},
            },
        ]
    content: dict[str, Any] = {"application/json": {"schema": schema}}
    if path == "/v1/deliveries":
        params += [
            {"name": "topic", "in": "query", "schema": {"type": "string"}},
            {
                "name": "consumer",
                "in": "query",
                "description": "a consumer's stream: its own filter, from its own cursor",
                "schema": {"type": "string"},
            },
            {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0}},
            {"name": "follow", "in": "query", "schema": {"type": "boolean"}},
        ]
        content = {"application/x-ndjson": {"schema": _ref("Delivery")}}
    if path == "/v1/records":
        params += [
            {
                "name": "after",
                "in": "query",
                "description": "cursor GENERATION:OFFSET (the previous page's next)",
                "schema": {"type": "string", "pattern": "^[1-9][0-9]*:[0-9]+$"},
            },
            {
                "name": "limit",
                "in": "query",
                "schema": {"type": "integer", "minimum": 0, "maximum": 10000},
            },
        ]
        content = {"application/json": {"schema": _ref("RecordPage")}}
    if path == "/metrics":
        content = {"text/plain": {"schema": {"type": "string"}}}
    op["responses"][ok] = {"description": "success", "content": content}
    op["responses"].update(_error_responses())
    if params:
        op["parameters"] = params
    return op


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document served at ``/openapi.json``."""
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary in ENDPOINTS:
        paths.setdefault(path, {})[method] = _op(method, path, summary)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Pulsarcast sidecar API",
            "version": "1.0.0",
            "description": "Topic-based publish/subscribe over IPFS (docs/http-api.md).",
        },
        "servers": [{"url": "http://127.0.0.1:5050"}],
        "components": {
            "schemas": {
                "Error": _ERROR,
                "PeerPolicy": _PEER_POLICY,
                "Topic": _TOPIC,
                "TopicOptions": _TOPIC_OPTIONS,
                "Event": _EVENT,
                "HistoryPage": _HISTORY_PAGE,
                "Delivery": _DELIVERY,
                "Publish": _PUBLISH,
                "Attributes": _ATTRIBUTES,
                "Subscribe": _SUBSCRIBE,
                "OpenConsumer": _OPEN_CONSUMER,
                "Consumer": _CONSUMER,
                "RecordPage": _RECORD_PAGE,
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": paths,
    }
