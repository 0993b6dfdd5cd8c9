package checker

import (
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/workload"
)

// regInput is a register operation's input.
type regInput struct {
	Op    string // submit, get, lease, complete, cancel
	Key   string
	Value string // submit: payload
	Token uint64 // complete: the lease
	Out   string // complete: the output
}

// regOutput is what the operation returned.
type regOutput struct {
	Unknown bool // the outcome is unknown (the op may or may not have happened)
	Stale   bool // complete: refused as stale
	Found   bool
	// get
	Status  string
	Token   uint64 // get: the current lease; lease: the granted one
	Output  string
	Payload string
	// cancel
	Cancelled bool
}

// regState is one register task's state.
type regState struct {
	St     string // absent, pending, leased, done, cancelled, failed
	V      string
	Tok    uint64 // current lease (0 = unknown while leased)
	Out    string
	MaxTok uint64
}

func (s regState) String() string {
	switch s.St {
	case "leased":
		if s.Tok == 0 {
			return "leased(?)"
		}
		return fmt.Sprintf("leased(%d)", s.Tok)
	case "done":
		return fmt.Sprintf("done(%s)", s.Out)
	}
	return s.St
}

// closure adds the states a task reaches by itself: a lease that is not
// heartbeated expires and, with one attempt allowed, the task fails.
func regClosure(s regState) []regState {
	if s.St == "leased" {
		f := s
		f.St, f.Tok = "failed", 0
		return []regState{s, f}
	}
	return []regState{s}
}

func statusMatches(s regState, o regOutput) bool {
	if !o.Found {
		return s.St == "absent"
	}
	if s.St == "absent" || o.Payload != s.V {
		return false
	}
	switch o.Status {
	case "queued", "scheduled", "retrying":
		return s.St == "pending"
	case "running":
		return s.St == "leased" && (s.Tok == 0 || s.Tok == o.Token)
	case "succeeded":
		return s.St == "done" && s.Out == o.Output
	case "cancelled":
		return s.St == "cancelled"
	case "failed", "expired":
		return s.St == "failed"
	}
	return false
}

func regStep(s0 regState, in regInput, out regOutput) []regState {
	var next []regState
	for _, s := range regClosure(s0) {
		switch in.Op {
		case "submit":
			switch {
			case s.St == "absent":
				n := s
				n.St, n.V = "pending", in.Value
				next = append(next, n)
				if out.Unknown {
					next = append(next, s)
				}
			default:
				// A duplicate submit changes nothing.
				next = append(next, s)
			}
		case "get":
			if statusMatches(s, out) {
				n := s
				if out.Status == "running" && s.Tok == 0 {
					if out.Token <= s.MaxTok {
						continue
					}
					n.Tok, n.MaxTok = out.Token, out.Token
				}
				next = append(next, n)
			}
		case "lease":
			if out.Unknown {
				next = append(next, s)
				if s.St == "pending" {
					n := s
					n.St, n.Tok = "leased", 0
					next = append(next, n)
				}
				continue
			}
			if s.St == "pending" && out.Token > s.MaxTok {
				n := s
				n.St, n.Tok, n.MaxTok = "leased", out.Token, out.Token
				next = append(next, n)
			}
		case "complete":
			current := s.St == "leased" && (s.Tok == in.Token || (s.Tok == 0 && in.Token > s.MaxTok))
			mustBeCurrent := s.St == "leased" && s.Tok == in.Token
			switch {
			case out.Unknown:
				next = append(next, s)
				if current {
					n := s
					n.St, n.Out, n.Tok = "done", in.Out, in.Token
					n.MaxTok = max(n.MaxTok, in.Token)
					next = append(next, n)
				}
			case out.Stale:
				if !mustBeCurrent {
					next = append(next, s)
				}
			default:
				if current {
					n := s
					n.St, n.Out, n.Tok = "done", in.Out, in.Token
					n.MaxTok = max(n.MaxTok, in.Token)
					next = append(next, n)
				}
			}
		case "cancel":
			live := s.St == "pending" || s.St == "leased"
			switch {
			case out.Unknown:
				next = append(next, s)
				if live {
					n := s
					n.St, n.Tok = "cancelled", 0
					next = append(next, n)
				}
			case !out.Found:
				if s.St == "absent" {
					next = append(next, s)
				}
			case out.Cancelled:
				if live {
					n := s
					n.St, n.Tok = "cancelled", 0
					next = append(next, n)
				}
			default:
				// false: already ended, or an earlier attempt of this same
				// call did the cancelling.
				if live {
					n := s
					n.St, n.Tok = "cancelled", 0
					next = append(next, n)
				} else if s.St != "absent" {
					next = append(next, s)
				}
			}
		}
	}
	return next
}

// RegisterModel is the porcupine model of one register task, partitioned
// by key.
func RegisterModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			for _, op := range h {
				k := op.Input.(regInput).Key
				by[k] = append(by[k], op)
			}
			keys := sortedKeys(by)
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, by[k])
			}
			return out
		},
		Init: func() []any { return []any{regState{St: "absent"}} },
		Step: func(state, input, output any) []any {
			ns := regStep(state.(regState), input.(regInput), output.(regOutput))
			out := make([]any, len(ns))
			for i, s := range ns {
				out[i] = s
			}
			return out
		},
		Equal: func(a, b any) bool { return a.(regState) == b.(regState) },
		Hash: func(s any) uint64 {
			h := fnv.New64a()
			fmt.Fprintf(h, "%+v", s.(regState))
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(regInput), output.(regOutput)
			res := ""
			switch {
			case out.Unknown:
				res = "?"
			case out.Stale:
				res = "stale"
			case in.Op == "get":
				if !out.Found {
					res = "not found"
				} else {
					res = out.Status
					if out.Status == "running" {
						res += fmt.Sprintf("(%d)", out.Token)
					}
					if out.Status == "succeeded" {
						res += "(" + out.Output + ")"
					}
				}
			case in.Op == "lease":
				res = fmt.Sprint(out.Token)
			case in.Op == "cancel":
				res = fmt.Sprint(out.Cancelled)
				if !out.Found {
					res = "not found"
				}
			default:
				res = "ok"
			}
			arg := ""
			if in.Op == "complete" {
				arg = fmt.Sprint(in.Token)
			}
			return fmt.Sprintf("%s(%s) -> %s", in.Op, arg, res)
		},
		DescribeState: func(s any) string { return s.(regState).String() },
		DescribeOperationMetadata: func(info any) string {
			if s, ok := info.(string); ok {
				return s
			}
			return ""
		},
	}
	return nm.ToModel()
}

// RegisterOperations turns the register part of a history into porcupine
// operations: failed reads are dropped, writes with unknown outcomes never
// return (Return = MaxInt64) and their process takes a new client id.
func RegisterOperations(ops []history.Op) []porcupine.Operation {
	var out []porcupine.Operation
	clientIDs := map[string]int{}
	nextID := 0
	clientOf := func(p string) int {
		id, ok := clientIDs[p]
		if !ok {
			id = nextID
			nextID++
			clientIDs[p] = id
		}
		return id
	}
	for _, p := range history.Pairs(ops) {
		var fn string
		switch p.F() {
		case workload.RegSubmit:
			fn = "submit"
		case workload.RegGet:
			fn = "get"
		case workload.RegLease:
			fn = "lease"
		case workload.RegComplete:
			fn = "complete"
		case workload.RegCancel:
			fn = "cancel"
		default:
			continue
		}
		if p.Invoke == nil {
			continue
		}
		iv := p.InvokeValue()
		in := regInput{Op: fn, Key: iv.Key, Value: iv.Payload, Token: iv.Token, Out: iv.Output}
		var o regOutput
		ret := p.End()
		typ := p.Type()
		var cv *history.Value
		if p.Completion != nil {
			cv = p.Completion.Value
		}
		switch typ {
		case history.OK:
			if cv != nil {
				o.Found = cv.Found == nil || *cv.Found
				o.Status, o.Token, o.Output, o.Payload = cv.Status, cv.Token, cv.Output, cv.Payload
				if cv.Cancelled != nil {
					o.Cancelled = *cv.Cancelled
				}
			}
		case history.Fail:
			if fn == "complete" && cv != nil && (cv.Code == "stale_lease" || cv.Code == "not_found") {
				o.Stale = true
			} else {
				// Definitely not executed: no information.
				continue
			}
		default:
			if fn == "get" {
				continue
			}
			o.Unknown = true
			ret = math.MaxInt64
		}
		meta := fmt.Sprintf("%s on %s, history #%d", p.Process(), p.Node(), p.Invoke.Index)
		out = append(out, porcupine.Operation{ClientId: clientOf(p.Process()), Input: in, Call: p.Start(), Output: o, Return: ret, Metadata: meta})
		if o.Unknown {
			// The process goes on while this op may still take effect: it
			// continues as a new client.
			delete(clientIDs, p.Process())
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out
}

// Register checks the register workload for linearizability and, when
// htmlPath is not empty, writes porcupine's visualization there.
func Register(ops []history.Op, p Params, htmlPath string) (*Result, error) {
	r := newResult("register")
	pops := RegisterOperations(ops)
	keys := map[string]bool{}
	var unknownWrites int64
	for _, op := range pops {
		keys[op.Input.(regInput).Key] = true
		if op.Output.(regOutput).Unknown {
			unknownWrites++
		}
		r.Counts["ops_"+op.Input.(regInput).Op]++
	}
	r.Counts["operations"] = int64(len(pops))
	r.Counts["keys"] = int64(len(keys))
	r.Counts["unknown_writes"] = unknownWrites
	if len(pops) == 0 {
		r.unknown("no register operations")
		return r, nil
	}
	timeout := p.RegisterCheckTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	model := RegisterModel()
	res, info := porcupine.CheckOperationsVerbose(model, pops, timeout)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		// Name the keys whose histories are not linearizable.
		bad := 0
		for _, part := range model.Partition(pops) {
			if porcupine.CheckOperations(model, part) {
				continue
			}
			bad++
			key := part[0].Input.(regInput).Key
			r.fail("linearizable", nil, "task %s: %d operations have no linearization (see register.html)", key, len(part))
		}
		if bad == 0 {
			r.fail("linearizable", nil, "history is not linearizable (see register.html)")
		}
		r.Counts["illegal_keys"] = int64(bad)
	default:
		r.unknown("porcupine timed out after %s", timeout)
	}
	if htmlPath != "" {
		if err := porcupine.VisualizePath(model, info, htmlPath); err != nil {
			return r, fmt.Errorf("writing %s: %w", htmlPath, err)
		}
	}
	return r, nil
}
