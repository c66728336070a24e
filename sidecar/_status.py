"""``GET /v1/status``: this node's place in every tree it is in, built in one place
for the API and for the dashboard's snapshots (:mod:`._dashboard`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pulsarcast_ipfs.core import FastGroupState, TopicState, cid_str

if TYPE_CHECKING:
    from ._driver import Driver

__all__ = ["fast_json", "topic_status", "tree_status"]


def fast_json(st: FastGroupState | None) -> dict[str, Any] | None:
    """A topic's fast groups in ``/v1/status`` (docs/http-api.md)."""
    if st is None or not (st.fast or st.joined or st.members or st.helping):
        return None
    return {
        "subscribed_fast": st.fast,
        "joined": [{"publisher": p, "helper": h} for p, h in st.joined],
        "group": {
            "members": st.members,
            "direct": list(st.direct),
            "helpers": {h: list(ms) for h, ms in st.helpers},
        },
        "helping": {p: list(ms) for p, ms in st.helping},
    }


def tree_status(d: Driver, st: TopicState) -> dict[str, Any]:
    """A topic of ``/v1/status`` without its subscription's fields: the node's place
    in the tree, what it keeps, its fast groups (what the dashboard shows)."""
    return {
        "cid": cid_str(st.latest_cid),
        "root_cid": cid_str(st.topic_cid),
        "name": st.name,
        "role": st.role,
        "parent": st.parent,
        "children": list(st.children),
        "subscribed": st.subscribed,
        "acting_root": st.acting_root,
        "heads": [cid_str(c) for c in st.heads[:8]],
        "retained": st.retained,
        "retained_bytes": st.retained_bytes,
        "fast": fast_json(d.fast_state(st.topic_cid)),
    }


def topic_status(d: Driver, st: TopicState) -> dict[str, Any]:
    """One topic of ``/v1/status`` (docs/http-api.md): :func:`tree_status` and the
    subscription's ``filter``, ``filters``, ``explicit``, ``consumers``, ``summary``
    and ``child_summaries``."""
    return {**tree_status(d, st), **d.subs.status(st.topic_cid, subscribed=st.subscribed)}
