"""An acting root whose JOIN is in flight when a recheck comes due (pure core, CoreNet).

Found by ``pulsarcast check`` (30 minutes, 10 nodes): a subscriber's sidecar,
SIGKILLed and restarted, acted as root of its topic (no closer peer answered yet) and
sent a JOIN; the driver's next routing refresh gave the node its known peers, which
makes every acting root look again at once (``set_known_peers``: ``recheck_at =
now``), also the one with that JOIN in flight (``acting root (joining)``). The
recheck then ran in a state the transition table has no row for, so the run-time
check raised ``LocalProtocolError`` out of ``handle_timer``, at every timer call from
then on: the fetch retries, HEADS rounds and acknowledgement timers after it in
``handle_timer`` never ran again (from 63 s after the restart: 20 tracebacks in
its log). The node, still walking its history back after the restart
(``tests/test_core_restart_long_gap.py``), delivered nothing until the end of the
run and its 120 s of drain (630 events missed), although EVENTs reached it.

Fixed: a recheck leaves a JOIN in flight alone (its own timeout decides: the next
peer, or acting root again with a recheck); the table says so.
"""

from __future__ import annotations

from pulsarcast_ipfs.core._treestate import TreeState, tree_state
from pulsarcast_ipfs.core.testing import CoreNet


def test_a_recheck_due_while_converging_leaves_the_join_alone() -> None:
    net = CoreNet(2, seed=1)
    author, member = net.peers
    topic = net.call(author, "create_topic", "alone")
    net.run_for(0.5)
    net.crash(author)
    net.call(member, "subscribe", topic)
    net.run_for(5)
    node = net.nodes[member]
    tree = node._trees[topic]
    assert tree_state(tree, member) is TreeState.ACTING_ROOT

    # The author is back; the routing refresh makes the acting root look again: it
    # JOINs the author (converging), and the author's answer is slow to come.
    net.revive(author)
    net.extra_delay = lambda a, b: 0.8
    net.call(member, "set_known_peers", [author])
    net.run_for(0.1)
    assert tree_state(tree, member) is TreeState.CONVERGING
    join = tree.join
    assert join is not None and join.peer == author

    # The next routing refresh, with the JOIN still in flight: a recheck comes due.
    net.call(member, "set_known_peers", [author])
    net.run_for(0.1)  # handle_timer: raised LocalProtocolError here before the fix
    assert tree.join is join  # left alone
    net.extra_delay = None
    net.run_for(30)
    assert net.nodes[member].topic_state(topic).parent == author
    published = net.call(author, "publish", topic, b"after").event_cid
    net.run_for(2)
    assert published in net.delivered(member, topic)
