package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/cronoq/cronoq/client"
)

func runMembers(ctx context.Context, s stdio, args []string) error {
	c := newCmd("members", "cronoq members", `
List the nodes of the cluster as gossip sees them, with their status: alive,
suspect, failed or left.

JSON output: [{"name", "addr", "status", "raft_addr", "http_addr", "version"}...]`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	members, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) ([]client.Member, error) { return cl.Members(ctx) })
	if err != nil {
		return err
	}
	if cf.out.json() {
		out := make([]memberJSON, 0, len(members))
		for _, m := range members {
			out = append(out, memberJSON(m))
		}
		return writeJSON(s.Stdout, out)
	}
	tb := newTable(s.Stdout, "NAME", "ADDR", "STATUS", "RAFT ADDR", "HTTP ADDR", "VERSION")
	for _, m := range members {
		tb.row(m.Name, m.Addr, m.Status, m.RaftAddr, m.HTTPAddr, m.Version)
	}
	return tb.flush()
}

// raftCommands are the subcommands of `cronoq operator raft`.
var raftCommands = map[string]command{
	"list-peers":          {Summary: "List the servers of the Raft configuration", Run: runListPeers},
	"remove-peer":         {Summary: "Remove a server from the Raft configuration for good", Run: runRemovePeer},
	"transfer-leadership": {Summary: "Hand leadership to another voter", Run: runTransferLeadership},
}

// operatorCommands are the subcommands of `cronoq operator`.
var operatorCommands = map[string]command{
	"raft":    {Summary: "Inspect and change the Raft configuration", Run: runRaft},
	"keyring": {Summary: "List, install, use and remove gossip encryption keys; generate one", Run: runKeyring},
}

func runOperator(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq operator", operatorCommands, args)
}

func runRaft(ctx context.Context, s stdio, args []string) error {
	return dispatch(ctx, s, "cronoq operator raft", raftCommands, args)
}

func runListPeers(ctx context.Context, s stdio, args []string) error {
	c := newCmd("operator raft list-peers", "cronoq operator raft list-peers", `
List the servers of the Raft configuration and which one leads.

JSON output: [{"id", "address", "voter": true, "leader": true|false}...]`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	peers, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) ([]client.Peer, error) { return cl.Peers(ctx) })
	if err != nil {
		return err
	}
	if cf.out.json() {
		out := make([]peerJSON, 0, len(peers))
		for _, p := range peers {
			out = append(out, peerJSON(p))
		}
		return writeJSON(s.Stdout, out)
	}
	tb := newTable(s.Stdout, "ID", "ADDRESS", "VOTER", "LEADER")
	for _, p := range peers {
		tb.row(p.ID, p.Address, strconv.FormatBool(p.Voter), strconv.FormatBool(p.Leader))
	}
	return tb.flush()
}

func runRemovePeer(ctx context.Context, s stdio, args []string) error {
	c := newCmd("operator raft remove-peer", "cronoq operator raft remove-peer -id ID", `
Remove server ID from the Raft configuration for good (for instance a node that
was lost and will not come back). The ID may also be given as an argument.

JSON output: {"removed": "ID"}`)
	cf := c.clientFlags()
	var id string
	c.fs.StringVar(&id, "id", "", "`ID` of the server to remove (required)")
	if err := c.parse(s, args, -1); err != nil {
		return err
	}
	switch {
	case len(c.args) > 1:
		return c.usageErr("unexpected argument %q", c.args[1])
	case len(c.args) == 1 && id != "" && c.args[0] != id:
		return c.usageErr("give the server ID once: -id %s or argument %s", id, c.args[0])
	case len(c.args) == 1:
		id = c.args[0]
	}
	if id == "" {
		return c.usageErr("-id is required")
	}
	_, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (struct{}, error) {
		return struct{}{}, cl.RemovePeer(ctx, id)
	})
	if errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("no server %s in the Raft configuration", id)
	}
	if err != nil {
		return err
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, struct {
			Removed string `json:"removed"`
		}{id})
	}
	_, err = fmt.Fprintf(s.Stdout, "server %s removed from the Raft configuration\n", id)
	return err
}

func runTransferLeadership(ctx context.Context, s stdio, args []string) error {
	c := newCmd("operator raft transfer-leadership", "cronoq operator raft transfer-leadership [-id ID]", `
Hand leadership to voter ID, or to any suitable voter without -id, and print the
new leader.

JSON output: {"leader": "ID"}`)
	cf := c.clientFlags()
	var id string
	c.fs.StringVar(&id, "id", "", "`ID` of the voter to hand leadership to (default: any)")
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	leader, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (string, error) { return cl.TransferLeadership(ctx, id) })
	if errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("no server %s in the Raft configuration", id)
	}
	if err != nil {
		return err
	}
	if cf.out.json() {
		return writeJSON(s.Stdout, struct {
			Leader string `json:"leader"`
		}{leader})
	}
	_, err = fmt.Fprintf(s.Stdout, "leader is now %s\n", leader)
	return err
}

func runHealth(ctx context.Context, s stdio, args []string) error {
	c := newCmd("health", "cronoq health", `
Show the first answering node's view of the cluster: its name, the leader, the
current epoch, and "ok" or "degraded" (with the reasons). The exit status is 0
whenever a node answers, also when degraded.

JSON output: {"node", "leader", "epoch", "status": "ok|degraded", "reasons": [...]}`)
	cf := c.clientFlags()
	if err := c.parse(s, args, 0); err != nil {
		return err
	}
	h, err := dial(ctx, c, cf, func(ctx context.Context, cl *client.Client) (client.Health, error) { return cl.Health(ctx) })
	if err != nil {
		return err
	}
	if cf.out.json() {
		reasons := h.Reasons
		if reasons == nil {
			reasons = []string{}
		}
		return writeJSON(s.Stdout, healthJSON{Node: h.Node, Leader: h.Leader, Epoch: h.Epoch, Status: h.Status, Reasons: reasons})
	}
	tw := tabwriter.NewWriter(s.Stdout, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "node:\t%s\nleader:\t%s\nepoch:\t%d\nstatus:\t%s\n", dash(h.Node), dash(h.Leader), h.Epoch, dash(h.Status))
	for _, r := range h.Reasons {
		fmt.Fprintf(tw, "reason:\t%s\n", oneLine(r))
	}
	return tw.Flush()
}
