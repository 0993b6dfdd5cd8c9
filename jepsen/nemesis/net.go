// Package nemesis injects the faults of a run: network partitions with
// iptables inside the run's own network namespace, kills and restarts,
// SIGSTOP pauses, clock offsets and slow disks through the nodes' admin API,
// and worker "zombie" pauses; and it runs the fault schedules.
package nemesis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"
)

// Chain is the iptables chain every partition rule goes into.
const Chain = "JEPSEN"

// Grudge maps a destination IP to the source IPs whose packets it drops.
type Grudge map[string][]string

// Add drops packets from src to dst.
func (g Grudge) Add(src, dst string) {
	for _, s := range g[dst] {
		if s == src {
			return
		}
	}
	g[dst] = append(g[dst], src)
}

// Cut drops packets both ways between a and b.
func (g Grudge) Cut(a, b string) {
	g.Add(a, b)
	g.Add(b, a)
}

// Pairs lists the cut (src, dst) links, sorted.
func (g Grudge) Pairs() [][2]string {
	var out [][2]string
	for dst, srcs := range g {
		for _, src := range srcs {
			out = append(out, [2]string{src, dst})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][0] != out[j][0] {
			return out[i][0] < out[j][0]
		}
		return out[i][1] < out[j][1]
	})
	return out
}

// Dropped reports whether packets from src to dst are dropped.
func (g Grudge) Dropped(src, dst string) bool {
	for _, s := range g[dst] {
		if s == src {
			return true
		}
	}
	return false
}

// Net manages the partition rules. It refuses to touch a firewall outside
// an isolated network namespace (see CheckIsolated).
type Net struct {
	mu sync.Mutex
	// current is the grudge in force.
	current Grudge
}

// CheckIsolated returns an error unless the process runs in a network
// namespace whose only interface is the loopback, so that no rule the
// harness adds can touch a real network.
func CheckIsolated() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("listing interfaces: %w", err)
	}
	var names []string
	loUp := false
	for _, i := range ifs {
		names = append(names, i.Name)
		if i.Flags&net.FlagLoopback != 0 && i.Flags&net.FlagUp != 0 {
			loUp = true
		}
	}
	if len(ifs) != 1 || ifs[0].Flags&net.FlagLoopback == 0 {
		return fmt.Errorf("refusing to run outside an isolated network namespace (interfaces: %s); use jepsen/run-in-netns.sh", strings.Join(names, ", "))
	}
	if !loUp {
		return errors.New("the loopback interface is down (run `ip link set lo up` inside the namespace)")
	}
	return nil
}

func iptables(args ...string) error {
	full := append([]string{"-w"}, args...)
	out, err := exec.Command("iptables", full...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %w: %s", strings.Join(full, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Setup creates the chain and hooks it first into INPUT.
func (n *Net) Setup() error {
	if err := CheckIsolated(); err != nil {
		return err
	}
	_ = iptables("-N", Chain)
	if err := iptables("-F", Chain); err != nil {
		return err
	}
	if iptables("-C", "INPUT", "-j", Chain) != nil {
		if err := iptables("-I", "INPUT", "1", "-j", Chain); err != nil {
			return err
		}
	}
	n.current = Grudge{}
	return nil
}

// Apply replaces the rules in force with g.
func (n *Net) Apply(g Grudge) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := iptables("-F", Chain); err != nil {
		return err
	}
	n.current = Grudge{}
	for _, p := range g.Pairs() {
		if err := iptables("-A", Chain, "-s", p[0], "-d", p[1], "-j", "DROP"); err != nil {
			return err
		}
		n.current.Add(p[0], p[1])
	}
	return nil
}

// Heal removes every rule.
func (n *Net) Heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.current = Grudge{}
	return iptables("-F", Chain)
}

// Current returns a copy of the grudge in force.
func (n *Net) Current() Grudge {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := Grudge{}
	for dst, srcs := range n.current {
		out[dst] = append([]string(nil), srcs...)
	}
	return out
}

// ProbeResult is the outcome of dialling every cut link.
type ProbeResult struct {
	Checked int
	// Leaks lists links that connected or were refused although cut.
	Leaks []string
}

// Probe dials, for every cut link src->dst, from src to dst:port and
// expects a timeout. A refused or accepted connection means the packet got
// through.
func Probe(ctx context.Context, g Grudge, port int, timeout time.Duration) ProbeResult {
	pairs := g.Pairs()
	var mu sync.Mutex
	var wg sync.WaitGroup
	res := ProbeResult{Checked: len(pairs)}
	for _, p := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(p[0])}}
			c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p[1], fmt.Sprint(port)))
			if err == nil {
				_ = c.Close()
				mu.Lock()
				res.Leaks = append(res.Leaks, p[0]+"->"+p[1]+": connected")
				mu.Unlock()
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return
			}
			mu.Lock()
			res.Leaks = append(res.Leaks, fmt.Sprintf("%s->%s: %v", p[0], p[1], err))
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Strings(res.Leaks)
	return res
}
