#!/bin/sh
# Kubo configuration for a Pulsarcast node in the compose network (docs/protocol.md §2).
#
# The official ipfs/kubo image runs every /container-init.d/*.sh after `ipfs init`
# (with IPFS_PROFILE=test,pebbleds, as the local cluster does) and before `ipfs daemon`, on
# every start, so this file is the single place the configuration comes from. The
# keys and values are those of the local cluster
# (pulsarcast_ipfs.cluster.kubo_settings); tests/test_compose.py keeps them equal.
# Only the addresses differ, adapted to a docker network:
#   Addresses.API       0.0.0.0, so that the published port works (the sidecar
#                       itself uses 127.0.0.1: it shares this container's network)
#   Addresses.Swarm     0.0.0.0:4001 on the container's interface
#   Addresses.Announce  $PULSARCAST_ANNOUNCE: the node's Toxiproxy proxy, so that
#                       connections into the node pass its toxics (as with
#                       LocalCluster(toxiproxy=True)); empty: Kubo's own addresses
set -eu

ipfs config --json Addresses.API '"/ip4/0.0.0.0/tcp/5001"'
ipfs config --json Addresses.Gateway '[]'
ipfs config --json Addresses.Swarm '["/ip4/0.0.0.0/tcp/4001"]'
if [ -n "${PULSARCAST_ANNOUNCE:-}" ]; then
  ipfs config --json Addresses.Announce "[\"${PULSARCAST_ANNOUNCE}\"]"
else
  ipfs config --json Addresses.Announce '[]'
fi
ipfs config --json Bootstrap '[]'
ipfs config --json AutoConf.Enabled false
ipfs config --json AutoNAT.ServiceMode '"disabled"'
ipfs config --json AutoTLS.Enabled false
ipfs config --json Discovery.MDNS.Enabled false
ipfs config --json Routing.Type '"dhtserver"'
ipfs config --json Routing.LoopbackAddressesOnLanDHT true
ipfs config --json Provide.DHT.SweepEnabled false
ipfs config --json Provide.Strategy '"pinned"'
ipfs config --json Provide.Enabled true
ipfs config --json Provide.DHT.Interval '"0s"'
ipfs config --json Experimental.Libp2pStreamMounting true
ipfs config --json Pubsub.Enabled false
ipfs config --json Pubsub.Router '""'
ipfs config --json Swarm.RelayClient.Enabled false
ipfs config --json Swarm.RelayService.Enabled false
ipfs config --json Swarm.DisableNatPortMap true
ipfs config --json Swarm.ConnMgr.Type '"basic"'
ipfs config --json Swarm.ConnMgr.LowWater 250
ipfs config --json Swarm.ConnMgr.HighWater 400
ipfs config --json Swarm.ConnMgr.GracePeriod '"2m"'
ipfs config --json Swarm.ResourceMgr.MaxMemory '"1GB"'
ipfs config --json Swarm.ResourceMgr.MaxFileDescriptors 4096
