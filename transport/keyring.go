package transport

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cronoq/cronoq/api/apierr"
	cronoqv1 "github.com/cronoq/cronoq/api/cronoqv1"
	"github.com/cronoq/cronoq/cluster"
)

// The gossip keyring calls. The node that gets one applies it on every
// alive gossip member: on itself directly, on each other member by sending
// it the same call with the HeaderForwarded header, which makes a node
// apply the call to itself only (as a forwarded call is never forwarded
// again). The answer lists each node's keyring after the operation, or its
// error; a node that failed does not fail the call.
//
// use and remove first read every keyring: use is refused unless every node
// has the key (a node without it could not read what the others send), and
// remove while the key is some node's primary.

// keyringOp is one keyring operation.
type keyringOp int

const (
	keyringList keyringOp = iota
	keyringInstall
	keyringUse
	keyringRemove
)

func (op keyringOp) String() string {
	return [...]string{"list", "install", "use", "remove"}[op]
}

// keyringFanoutTimeout bounds the call to one other node.
const keyringFanoutTimeout = 10 * time.Second

func (o *operatorService) KeyringList(ctx context.Context, req *connect.Request[cronoqv1.KeyringListRequest]) (*connect.Response[cronoqv1.KeyringResponse], error) {
	return o.s.keyringCall(ctx, req.Header(), keyringList, "")
}

func (o *operatorService) KeyringInstall(ctx context.Context, req *connect.Request[cronoqv1.KeyringInstallRequest]) (*connect.Response[cronoqv1.KeyringResponse], error) {
	return o.s.keyringCall(ctx, req.Header(), keyringInstall, req.Msg.GetKey())
}

func (o *operatorService) KeyringUse(ctx context.Context, req *connect.Request[cronoqv1.KeyringUseRequest]) (*connect.Response[cronoqv1.KeyringResponse], error) {
	return o.s.keyringCall(ctx, req.Header(), keyringUse, req.Msg.GetKey())
}

func (o *operatorService) KeyringRemove(ctx context.Context, req *connect.Request[cronoqv1.KeyringRemoveRequest]) (*connect.Response[cronoqv1.KeyringResponse], error) {
	return o.s.keyringCall(ctx, req.Header(), keyringRemove, req.Msg.GetKey())
}

// nodeKeyring is one node's answer to a keyring operation.
type nodeKeyring struct {
	node string
	kr   cluster.GossipKeyring
	err  error
}

// keyringTarget is a node a keyring operation goes to.
type keyringTarget struct {
	name, httpAddr string
}

// keyringCall serves a keyring call: on this node only when another node
// sent it (HeaderForwarded), otherwise on every alive member.
func (s *Server) keyringCall(ctx context.Context, h http.Header, op keyringOp, key string) (*connect.Response[cronoqv1.KeyringResponse], error) {
	if s.stopping() {
		return nil, apierr.ShuttingDown()
	}
	if op != keyringList {
		b, err := cluster.ParseGossipKey(key)
		if err != nil {
			return nil, apierr.Invalid("key", err.Error())
		}
		key = base64.StdEncoding.EncodeToString(b) // one spelling per key
	}
	if forwarded(h) {
		kr, err := s.keyringLocal(op, key)
		if err != nil {
			return nil, s.keyringError(err)
		}
		return connect.NewResponse(keyringResponse([]nodeKeyring{{node: s.node.ID(), kr: kr}})), nil
	}
	if _, err := s.node.GossipKeyring(); err != nil {
		return nil, s.keyringError(err)
	}
	targets := s.keyringTargets()
	if op == keyringUse || op == keyringRemove {
		before := s.keyringFanout(ctx, h, keyringList, "", targets)
		if err := checkKeyringChange(op, key, before); err != nil {
			return nil, err
		}
	}
	res := s.keyringFanout(ctx, h, op, key, targets)
	if ctx.Err() != nil {
		return nil, s.apiError(ctx.Err())
	}
	if op != keyringList {
		failed := 0
		for _, r := range res {
			if r.err != nil {
				failed++
			}
		}
		s.log.Info("gossip keyring changed", "op", op.String(), "nodes", len(res), "failed", failed)
	}
	return connect.NewResponse(keyringResponse(res)), nil
}

// keyringLocal does op on this node.
func (s *Server) keyringLocal(op keyringOp, key string) (cluster.GossipKeyring, error) {
	switch op {
	case keyringInstall:
		return s.node.InstallGossipKey(key)
	case keyringUse:
		return s.node.UseGossipKey(key)
	case keyringRemove:
		return s.node.RemoveGossipKey(key)
	default:
		return s.node.GossipKeyring()
	}
}

// keyringError is the wire error of a keyring operation's failure.
func (s *Server) keyringError(err error) error {
	switch {
	case errors.Is(err, cluster.ErrGossipEncryptionDisabled),
		errors.Is(err, cluster.ErrGossipKeyNotInstalled),
		errors.Is(err, cluster.ErrGossipKeyPrimary):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return s.apiError(err)
}

// keyringTargets are the alive gossip members (suspect ones included: they
// have not been declared failed), this node among them.
func (s *Server) keyringTargets() []keyringTarget {
	self := s.node.ID()
	out := []keyringTarget{{name: self}}
	for _, m := range s.node.Members() {
		if m.Name == self || (m.Status != cluster.StatusAlive && m.Status != cluster.StatusSuspect) {
			continue
		}
		out = append(out, keyringTarget{name: m.Name, httpAddr: m.HTTPAddr})
	}
	return out
}

// keyringFanout does op on every target at once: on this node directly, on
// the others through their API; it returns their answers sorted by node.
func (s *Server) keyringFanout(ctx context.Context, h http.Header, op keyringOp, key string, targets []keyringTarget) []nodeKeyring {
	out := make([]nodeKeyring, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		out[i].node = t.name
		if t.name == s.node.ID() {
			out[i].kr, out[i].err = s.keyringLocal(op, key)
			continue
		}
		if t.httpAddr == "" {
			out[i].err = errors.New("its API address is not known")
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, keyringFanoutTimeout)
			defer cancel()
			out[i].kr, out[i].err = s.keyringRemote(cctx, h, t, op, key)
		}()
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b nodeKeyring) int { return strings.Compare(a.node, b.node) })
	return out
}

// keyringRemote does op on target t alone.
func (s *Server) keyringRemote(ctx context.Context, h http.Header, t keyringTarget, op keyringOp, key string) (cluster.GossipKeyring, error) {
	ep := s.fwd.endpoint(t.httpAddr)
	var resp *connect.Response[cronoqv1.KeyringResponse]
	var err error
	switch op {
	case keyringInstall:
		resp, err = ep.operator.KeyringInstall(ctx, fanoutRequest(s, h, &cronoqv1.KeyringInstallRequest{Key: key}))
	case keyringUse:
		resp, err = ep.operator.KeyringUse(ctx, fanoutRequest(s, h, &cronoqv1.KeyringUseRequest{Key: key}))
	case keyringRemove:
		resp, err = ep.operator.KeyringRemove(ctx, fanoutRequest(s, h, &cronoqv1.KeyringRemoveRequest{Key: key}))
	default:
		resp, err = ep.operator.KeyringList(ctx, fanoutRequest(s, h, &cronoqv1.KeyringListRequest{}))
	}
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return cluster.GossipKeyring{}, errors.New(ce.Message())
		}
		return cluster.GossipKeyring{}, err
	}
	nodes := resp.Msg.GetNodes()
	if len(nodes) != 1 || nodes[0].GetNode() != t.name {
		return cluster.GossipKeyring{}, fmt.Errorf("unexpected answer from %s: %d node results", t.httpAddr, len(nodes))
	}
	return cluster.GossipKeyring{Primary: nodes[0].GetPrimary(), Keys: nodes[0].GetKeys()}, nil
}

// fanoutRequest is the request of a keyring call sent to another node: it
// carries HeaderForwarded (this node's id), so that the node applies it to
// itself only, and the caller's credentials.
func fanoutRequest[T any](s *Server, h http.Header, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set(HeaderForwarded, s.node.ID())
	if v := h.Get(HeaderToken); v != "" {
		// Each node checks the caller's token itself.
		req.Header().Set(HeaderToken, v)
	}
	if v := h.Get("Authorization"); v != "" {
		req.Header().Set("Authorization", v)
	}
	return req
}

// checkKeyringChange refuses a use or remove of key that the keyrings
// before it (every node's) do not allow.
func checkKeyringChange(op keyringOp, key string, before []nodeKeyring) error {
	var unread, missing, primary, holders []string
	for _, r := range before {
		switch {
		case r.err != nil:
			unread = append(unread, fmt.Sprintf("%s: %v", r.node, r.err))
			continue
		case r.kr.Primary == key:
			primary = append(primary, r.node)
		}
		if slices.Contains(r.kr.Keys, key) {
			holders = append(holders, r.node)
		} else {
			missing = append(missing, r.node)
		}
	}
	failed := func(format string, args ...any) error {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(format, args...))
	}
	switch {
	case len(unread) > 0:
		return failed("cannot %s the key: the keyring of every node must be read first, and %s", op, strings.Join(unread, "; "))
	case op == keyringUse && len(missing) > 0:
		return failed("the key is not installed on every node (missing on %s): install it first", strings.Join(missing, ", "))
	case op == keyringRemove && len(primary) > 0:
		return failed("the key is the primary key of %s: make another key primary (use) before removing it", strings.Join(primary, ", "))
	case op == keyringRemove && len(holders) == 0:
		return apierr.NotFound("the key is not installed on any node")
	}
	return nil
}

// keyringResponse is the answer listing results (sorted by node): each
// node's keyring or error, and each key with the nodes that hold it and
// whose primary it is, the keys primary on most nodes first.
func keyringResponse(results []nodeKeyring) *cronoqv1.KeyringResponse {
	out := &cronoqv1.KeyringResponse{NumNodes: int32(len(results))}
	byKey := map[string]*cronoqv1.KeyringKey{}
	for _, r := range results {
		n := &cronoqv1.KeyringNode{Node: r.node}
		if r.err != nil {
			n.Error = r.err.Error()
			out.Nodes = append(out.Nodes, n)
			continue
		}
		n.Primary, n.Keys = r.kr.Primary, r.kr.Keys
		out.Nodes = append(out.Nodes, n)
		for _, k := range r.kr.Keys {
			kk := byKey[k]
			if kk == nil {
				kk = &cronoqv1.KeyringKey{Key: k}
				byKey[k] = kk
				out.Keys = append(out.Keys, kk)
			}
			kk.Nodes++
			if k == r.kr.Primary {
				kk.PrimaryOn = append(kk.PrimaryOn, r.node)
			}
		}
	}
	slices.SortFunc(out.Keys, func(a, b *cronoqv1.KeyringKey) int {
		return cmp.Or(
			cmp.Compare(len(b.PrimaryOn), len(a.PrimaryOn)),
			cmp.Compare(b.Nodes, a.Nodes),
			strings.Compare(a.Key, b.Key))
	})
	return out
}
