# cronoq agent -config docs/examples/server2.hcl
#
# Server 2 of a three-server cluster. As written, the three files run on
# one machine (loopback, ports 8650, 8660 and 8670 for the API); on three
# machines, give each node its own IP in the addresses and in join, and use
# the same ports everywhere. Flags on the command line override this file.

node_id  = "server2"
data_dir = "data/server2" # relative to the working directory; /var/lib/cronoq on a server

# API (clients, workers, the other nodes' forwarded calls), Raft and gossip.
http_addr   = "127.0.0.1:8660"
raft_addr   = "127.0.0.1:8661"
gossip_addr = "127.0.0.1:8662"

# The cluster forms once three servers see each other; the same join list
# (every server, this one included) is given to each, and retried until it
# succeeds.
bootstrap_expect = 3
join             = ["127.0.0.1:8652", "127.0.0.1:8662", "127.0.0.1:8672"]

log_level = "info"

# Limits (these are the defaults).
max_payload      = "1MiB"
max_output       = "1MiB"
heartbeat_window = "10s"
retention        = "24h"
max_attempts     = 5

# Settings a pool starts with (an operator may change them later with
# 'cronoq pool set'); pools not named here take the defaults.
pool "etl" {
  max_running = 8      # at most 8 tasks of the pool run at once
  max_pending = 100000 # beyond that, submits ...
  overflow    = "wait" # ... wait for room
}

pool "email" {
  rate  = 50 # tasks started per second
  burst = 100
}

# TLS, gossip encryption and ACLs (see docs/security.md):
# tls_ca              = "/etc/cronoq/cronoq-ca.pem"
# tls_cert            = "/etc/cronoq/server2.pem"
# tls_key             = "/etc/cronoq/server2-key.pem"
# tls_verify_incoming = true
# encrypt             = "BASE64KEY from 'cronoq operator keyring generate'"
# acl                 = true
