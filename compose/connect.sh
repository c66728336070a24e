#!/bin/sh
# One-shot: connect every Kubo node of the compose network to the others, through
# their Toxiproxy proxies (there is no public bootstrap, docs/protocol.md §2). The local
# cluster does the same with `swarm connect` (seeds plus a ring).
#   PULSARCAST_NODES   "kubo0=toxiproxy:14000 kubo1=toxiproxy:14001 ..."
set -eu

wait_api() {
  i=0
  until ipfs --api "/dns4/$1/tcp/5001" id -f '<id>' >/dev/null 2>&1; do
    i=$((i + 1))
    [ "$i" -lt 120 ] || { echo "connect: $1's API did not come up" >&2; exit 1; }
    sleep 1
  done
}

for entry in $PULSARCAST_NODES; do wait_api "${entry%%=*}"; done

for entry in $PULSARCAST_NODES; do
  node=${entry%%=*}
  for other in $PULSARCAST_NODES; do
    peer=${other%%=*}
    [ "$peer" = "$node" ] && continue
    dial=${other#*=}
    id=$(ipfs --api "/dns4/$peer/tcp/5001" id -f '<id>')
    ipfs --api "/dns4/$node/tcp/5001" swarm connect \
      "/dns4/${dial%%:*}/tcp/${dial#*:}/p2p/$id" >/dev/null
    echo "connect: $node -> $peer via $dial"
  done
done
echo "connect: done"
