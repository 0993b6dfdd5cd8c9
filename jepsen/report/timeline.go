package report

import (
	"fmt"
	"html"
	"os"
	"sort"
	"strings"

	"github.com/cronoq/cronoq/jepsen/checker"
	"github.com/cronoq/cronoq/jepsen/history"
	"github.com/cronoq/cronoq/jepsen/nemesis"
	"github.com/cronoq/cronoq/jepsen/nodes"
)

// lane is the timeline lane of a process: workers' per-lease processes
// (w1/123) share their worker's lane.
func lane(p string) string {
	if i := strings.IndexByte(p, '/'); i > 0 {
		return p[:i]
	}
	return p
}

var leaderColors = []string{"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2"}

// WriteTimeline writes timeline.html: one lane per process, nemesis steps
// as bands across all lanes, the leader at every instant, and the ops that
// anomalies name outlined and listed.
func WriteTimeline(path string, ops []history.Op, leaders []nodes.LeaderSample, results []*checker.Result) error {
	pairs := history.Pairs(ops)
	var end int64 = 1
	for _, op := range ops {
		end = max(end, op.Time)
	}
	for _, s := range leaders {
		end = max(end, s.T)
	}
	lanes := map[string]bool{}
	for _, p := range pairs {
		lanes[lane(p.Process())] = true
	}
	names := make([]string, 0, len(lanes))
	for l := range lanes {
		if l != nemesis.Process {
			names = append(names, l)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		// Clients, then workers, then the rest.
		ri, rj := laneRank(names[i]), laneRank(names[j])
		if ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})
	names = append([]string{"leader", nemesis.Process}, names...)
	row := map[string]int{}
	for i, n := range names {
		row[n] = i
	}
	const (
		left   = 110
		laneH  = 22
		top    = 24
		pxPerS = 14.0
	)
	width := left + int(float64(end)/1e9*pxPerS) + 40
	height := top + laneH*len(names) + 10
	x := func(t int64) float64 { return left + float64(t)/1e9*pxPerS }

	bad := map[int64][]string{}
	for _, r := range results {
		for _, a := range r.Anomalies {
			for _, i := range a.Ops {
				bad[i] = append(bad[i], r.Name+" "+a.Invariant+": "+a.Detail)
			}
		}
	}

	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><title>cronoq jepsen timeline</title>
<style>body{font:12px sans-serif;margin:8px} svg text{font:11px sans-serif} .lbl{fill:#333}
rect.op:hover{stroke:#000;stroke-width:1} #wrap{overflow-x:auto;border:1px solid #ccc}</style></head><body>
<h3>cronoq jepsen timeline</h3>
<p>green ok, red fail, orange unknown (info), grey never completed; black outline: named by an anomaly.
Bands: nemesis steps. Top lane: the leader (one colour per node, white: none). Hover for details.</p>
`)
	if len(bad) > 0 {
		b.WriteString("<h4>Anomalies</h4><ul>")
		for _, r := range results {
			for _, a := range r.Anomalies {
				b.WriteString("<li>" + html.EscapeString(r.Name+" "+a.Invariant+": "+a.Detail))
				for _, i := range a.Ops {
					fmt.Fprintf(&b, ` <a href="#op-%d">#%d</a>`, i, i)
				}
				b.WriteString("</li>")
			}
		}
		b.WriteString("</ul>")
	}
	fmt.Fprintf(&b, `<div id="wrap"><svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d">`, width, height)
	// Time axis.
	for s := int64(0); s <= end/1e9; s += 10 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="14" class="lbl">%ds</text>`,
			x(s*1e9), top, x(s*1e9), height, x(s*1e9)+2, s)
	}
	// Nemesis bands.
	for _, p := range pairs {
		if p.Process() != nemesis.Process || p.F() != "step" {
			continue
		}
		e := p.End()
		if e < 0 {
			e = end
		}
		v := p.InvokeValue()
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#ffd8d8" opacity="0.45"><title>%s</title></rect>`,
			x(p.Start()), top, max(1, x(e)-x(p.Start())), laneH*len(names), html.EscapeString(fmt.Sprintf("%s scenarios %v", v.Nemesis, v.Scenarios)))
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="lbl">%s</text>`, x(p.Start())+2, top+laneH*row[nemesis.Process]+15, html.EscapeString(v.Nemesis))
	}
	for i, n := range names {
		fmt.Fprintf(&b, `<text x="4" y="%d" class="lbl">%s</text><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ddd"/>`,
			top+laneH*i+15, html.EscapeString(n), left, top+laneH*(i+1), width, top+laneH*(i+1))
	}
	// Leader lane.
	colour := map[string]string{}
	for i := 0; i < len(leaders); i++ {
		s := leaders[i]
		next := end
		if i+1 < len(leaders) {
			next = leaders[i+1].T
		}
		c := "#ffffff"
		if s.Leader != "" {
			if _, ok := colour[s.Leader]; !ok {
				colour[s.Leader] = leaderColors[len(colour)%len(leaderColors)]
			}
			c = colour[s.Leader]
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s term %d</title></rect>`,
			x(s.T), top+2, max(0.5, x(next)-x(s.T)), laneH-4, c, html.EscapeString(orNone(s.Leader)), s.Term)
	}
	// Ops.
	for _, p := range pairs {
		l := lane(p.Process())
		if l == nemesis.Process && p.F() == "step" {
			continue
		}
		r := row[l]
		start := p.Start()
		e := p.End()
		fill := "#59a14f"
		switch p.Type() {
		case history.Fail:
			fill = "#e15759"
		case history.Info:
			fill = "#f28e2b"
		}
		if e < 0 {
			fill, e = "#aaaaaa", end
		}
		w := max(1.5, x(e)-x(start))
		idx := int64(-1)
		if p.Completion != nil {
			idx = p.Completion.Index
		}
		inv := int64(-1)
		if p.Invoke != nil {
			inv = p.Invoke.Index
		}
		stroke := ""
		notes := append(bad[idx], bad[inv]...)
		if len(notes) > 0 {
			stroke = ` stroke="#000" stroke-width="2"`
		}
		title := fmt.Sprintf("#%d %s %s %s on %s", max(idx, inv), p.Process(), p.F(), p.Type(), orNone(p.Node()))
		v := p.Value()
		if d := describe(v); d != "" {
			title += "\n" + d
		}
		if p.Completion != nil && p.Completion.Err != "" {
			title += "\nerror: " + p.Completion.Err
		}
		for _, n := range notes {
			title += "\nANOMALY " + n
		}
		idAttr := ""
		if len(notes) > 0 {
			idAttr = fmt.Sprintf(` id="op-%d"`, max(idx, inv))
		}
		fmt.Fprintf(&b, `<rect class="op"%s x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"%s><title>%s</title></rect>`,
			idAttr, x(start), top+laneH*r+4, w, laneH-8, fill, stroke, html.EscapeString(title))
	}
	b.WriteString("</svg></div></body></html>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func laneRank(l string) int {
	switch {
	case strings.HasPrefix(l, "c"):
		return 0
	case strings.HasPrefix(l, "w"):
		return 1
	}
	return 2
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func describe(v *history.Value) string {
	if v == nil {
		return ""
	}
	var parts []string
	add := func(k, val string) {
		if val != "" {
			parts = append(parts, k+"="+val)
		}
	}
	add("key", v.Key)
	add("id", v.ID)
	if v.Token != 0 {
		add("token", fmt.Sprint(v.Token))
	}
	if v.Attempt != 0 {
		add("attempt", fmt.Sprint(v.Attempt))
	}
	add("outcome", v.Outcome)
	add("status", v.Status)
	add("schedule", v.Schedule)
	add("nemesis", v.Nemesis)
	add("code", v.Code)
	add("detail", v.Detail)
	if len(v.Targets) > 0 {
		add("targets", strings.Join(v.Targets, ","))
	}
	if v.Cancelled != nil {
		add("cancelled", fmt.Sprint(*v.Cancelled))
	}
	return strings.Join(parts, " ")
}
