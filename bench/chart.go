package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

var sysColor = map[string]string{
	"cronoq":               "#2b6cb0",
	"cronoq-secure":        "#2c5282",
	"cronoq-sub":           "#4299e1",
	"river":                "#c05621",
	"river-tuned":          "#f6ad55",
	"asynq-always":         "#9b2c2c",
	"asynq-always-tuned":   "#b83280",
	"asynq-everysec":       "#e53e3e",
	"asynq-everysec-tuned": "#fbb6ce",
	"raft":                 "#718096",
}

// renderChart draws chart.svg: W1 throughput per system (median bar,
// min–max whisker, the bare raft harness beside them) and W3 latency per
// system and offered rate (p50 solid, p99 light, log scale).
func renderChart(rep *Report) string {
	const (
		W, H            = 1120, 540
		top, bottom     = 60, 390
		lx0, lx1        = 70, 500
		rx0, rx1        = 600, 1090
		font            = `font-family="DejaVu Sans, Arial, sans-serif"`
		titleSize, tick = 15, 11
	)
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s>`+"\n", W, H, W, H, font)
	w(`<defs><pattern id="nc" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/><line x1="0" y1="0" x2="0" y2="6" stroke="#999" stroke-width="3"/></pattern></defs>` + "\n")
	w(`<rect width="%d" height="%d" fill="#fff"/>`+"\n", W, H)
	w(`<text x="%d" y="24" font-size="17" font-weight="bold">cronoq (3 copies) vs River and asynq (1 copy) — fsync p50 %.2f ms, p99 %.2f ms</text>`+"\n", lx0-40, rep.Fsync.P50ms, rep.Fsync.P99ms)

	// W1.
	w(`<text x="%d" y="%d" font-size="%d" font-weight="bold">W1 burn-down: tasks/s (median, min–max)</text>`+"\n", lx0, top-14, titleSize)
	type bar struct {
		name     string
		med, lo  float64
		hi       float64
		ok       bool
		sublabel string
	}
	var bars []bar
	for _, name := range allSystems {
		var s *Summary
		metric := "tasks_per_s"
		sub := ""
		if name == "raft" {
			s, metric, sub = rep.find("raft", "raft", 0), "applies_per_s", "applies/s"
		} else {
			s = rep.find(name, "w1", 0)
		}
		if s == nil {
			continue
		}
		st := s.Metrics[metric]
		bars = append(bars, bar{name: name, med: float64(st.Median), lo: float64(st.Min), hi: float64(st.Max), ok: st.ok(), sublabel: sub})
	}
	if len(bars) == 0 {
		w(`<text x="%d" y="%d" font-size="13" fill="#666">W1 not run</text>`+"\n", lx0+20, (top+bottom)/2)
	} else {
		maxV := 0.0
		for _, br := range bars {
			if br.ok {
				maxV = math.Max(maxV, math.Max(br.hi, br.med))
			}
		}
		step := niceStep(maxV / 5)
		if step <= 0 {
			step = 1
		}
		ymax := math.Ceil(maxV/step) * step
		if ymax <= 0 {
			ymax = 1
		}
		y := func(v float64) float64 { return bottom - v/ymax*float64(bottom-top) }
		for v := 0.0; v <= ymax+step/2; v += step {
			w(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e2e8f0"/>`+"\n", lx0, lx1, y(v), y(v))
			w(`<text x="%d" y="%.1f" font-size="%d" text-anchor="end" fill="#4a5568">%s</text>`+"\n", lx0-6, y(v)+4, tick, fmtNum(jf(v)))
		}
		slot := float64(lx1-lx0) / float64(len(bars))
		longest := 0
		for _, br := range bars {
			longest = max(longest, len(br.name))
		}
		// Level labels need about 7 px a character at 11 px.
		slanted := slot < 7*float64(longest)
		for i, br := range bars {
			cx := float64(lx0) + slot*(float64(i)+0.5)
			bw := slot * 0.6
			if br.ok {
				col := sysColor[br.name]
				w(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", cx-bw/2, y(br.med), bw, float64(bottom)-y(br.med), col)
				if br.hi > br.lo {
					w(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#1a202c" stroke-width="1.5"/>`+"\n", cx, cx, y(br.lo), y(br.hi))
					for _, v := range []float64{br.lo, br.hi} {
						w(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#1a202c" stroke-width="1.5"/>`+"\n", cx-6, cx+6, y(v), y(v))
					}
				}
				w(`<text x="%.1f" y="%.1f" font-size="%d" text-anchor="middle" font-weight="bold">%s</text>`+"\n", cx, math.Min(y(br.hi), y(br.med))-6, tick, fmtNum(jf(br.med)))
			} else {
				w(`<text x="%.1f" y="%d" font-size="%d" text-anchor="middle" fill="#c53030">failed</text>`+"\n", cx, bottom-6, tick)
			}
			label := br.name
			if br.name == "raft" {
				label = "bare raft"
			}
			copies := "1 copy"
			if isCronoq(br.name) || br.name == "raft" {
				copies = "3 copies"
			}
			if br.sublabel != "" {
				copies += ", " + br.sublabel
			}
			if slanted {
				// Too many bars for level labels: one slanted line each.
				w(`<text x="%.1f" y="%d" font-size="10" text-anchor="end" transform="rotate(-30 %.1f %d)">%s <tspan fill="#4a5568">(%s)</tspan></text>`+"\n",
					cx+4, bottom+14, cx+4, bottom+14, html.EscapeString(label), copies)
				continue
			}
			w(`<text x="%.1f" y="%d" font-size="%d" text-anchor="middle">%s</text>`+"\n", cx, bottom+16, tick, html.EscapeString(label))
			w(`<text x="%.1f" y="%d" font-size="10" text-anchor="middle" fill="#4a5568">%s</text>`+"\n", cx, bottom+30, copies)
		}
		w(`<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#1a202c"/>`+"\n", lx0, lx1, bottom, bottom)
	}

	// W3.
	w(`<text x="%d" y="%d" font-size="%d" font-weight="bold">W3 open loop: submit → durable completion, ms (log)</text>`+"\n", rx0, top-14, titleSize)
	rates := w3Rates(rep)
	if len(rates) == 0 {
		w(`<text x="%d" y="%d" font-size="13" fill="#666">W3 not run in this report</text>`+"\n", rx0+20, (top+bottom)/2)
	} else {
		var sysIn []string
		maxMs := 10.0
		for _, name := range allSystems {
			for _, r := range rates {
				if s := rep.find(name, "w3", r); s != nil {
					if !contains(sysIn, name) {
						sysIn = append(sysIn, name)
					}
					for _, k := range []string{"p50_ms", "p99_ms"} {
						v := float64(s.Metrics[k].Median)
						if !math.IsInf(v, 0) && !math.IsNaN(v) {
							maxMs = math.Max(maxMs, v)
						}
					}
				}
			}
		}
		lmin, lmax := 0.0, math.Ceil(math.Log10(maxMs*1.05))
		y := func(v float64) float64 {
			lv := math.Log10(math.Max(v, 1))
			return bottom - (lv-lmin)/(lmax-lmin)*float64(bottom-top)
		}
		for e := lmin; e <= lmax; e++ {
			v := math.Pow(10, e)
			w(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e2e8f0"/>`+"\n", rx0, rx1, y(v), y(v))
			w(`<text x="%d" y="%.1f" font-size="%d" text-anchor="end" fill="#4a5568">%s</text>`+"\n", rx0-6, y(v)+4, tick, fmtNum(jf(v)))
		}
		group := float64(rx1-rx0) / float64(len(rates))
		for gi, r := range rates {
			gx := float64(rx0) + group*float64(gi)
			slot := group * 0.85 / float64(len(sysIn))
			for si, name := range sysIn {
				s := rep.find(name, "w3", r)
				cx := gx + group*0.075 + slot*(float64(si)+0.5)
				bw := slot * 0.8
				if s == nil {
					continue
				}
				col := sysColor[name]
				p50, p99 := float64(s.Metrics["p50_ms"].Median), float64(s.Metrics["p99_ms"].Median)
				if !s.Metrics["p99_ms"].ok() {
					w(`<text x="%.1f" y="%d" font-size="10" text-anchor="middle" fill="#c53030">failed</text>`+"\n", cx, bottom-6)
					continue
				}
				if math.IsInf(p99, 1) {
					w(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="url(#nc)" stroke="%s"/>`+"\n", cx-bw/2, top, bw, bottom-top, col)
					w(`<text x="%.1f" y="%d" font-size="10" font-weight="bold" text-anchor="middle" fill="#c53030">n/c</text>`+"\n", cx, top+14)
				} else {
					w(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.35" stroke="%s"/>`+"\n", cx-bw/2, y(p99), bw, float64(bottom)-y(p99), col, col)
					w(`<text x="%.1f" y="%.1f" font-size="9" text-anchor="middle">%s</text>`+"\n", cx, y(p99)-3, fmtMs(jf(p99)))
				}
				if !math.IsInf(p50, 1) && !math.IsNaN(p50) {
					w(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", cx-bw/4, y(p50), bw/2, float64(bottom)-y(p50), col)
				}
			}
			w(`<text x="%.1f" y="%d" font-size="%d" text-anchor="middle">%s tasks/s offered</text>`+"\n", gx+group/2, bottom+16, tick, fmtNum(jf(r)))
		}
		w(`<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#1a202c"/>`+"\n", rx0, rx1, bottom, bottom)
		w(`<text x="%d" y="%d" font-size="10" fill="#4a5568">narrow solid bar = p50, wide light bar = p99; hatched n/c = that quantile never completed</text>`+"\n", rx0, bottom+32)
	}

	// Legend.
	x, ly := lx0, H-50
	for _, name := range allSystems {
		if !hasSystem(rep, name) {
			continue
		}
		label := name
		switch name {
		case "cronoq":
			label = "cronoq (3 copies)"
		case "cronoq-secure":
			label = "cronoq-secure (3 copies, TLS+ACLs)"
		case "cronoq-sub":
			label = "cronoq-sub (3 copies, a subscription read)"
		case "raft":
			label = "bare raft (3 copies)"
		default:
			label = name + " (1 copy)"
		}
		width := 16 + 7*len(label) + 20
		if x+width > W && x > lx0 {
			x, ly = lx0, ly+22
		}
		w(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d" font-size="12">%s</text>`+"\n", x, ly, sysColor[name], x+16, ly+10, label)
		x += width
	}
	w("</svg>\n")
	return b.String()
}

// hasSystem reports whether rep holds a cell of the system.
func hasSystem(rep *Report, name string) bool {
	for _, c := range rep.Cells {
		if c.System == name {
			return true
		}
	}
	return false
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}
