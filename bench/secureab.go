package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// abPair is one run's cell of cronoq and of cronoq-secure for the same
// workload and rate: the two ran back to back (the order alternating with
// the run), so their ratio is the cost of TLS and ACLs with the least of
// the machine's drift in it.
type abPair struct {
	run           int
	plain, secure CellResult
	first         string // the system whose cell ran first
}

// abPairs pairs the successful cronoq and cronoq-secure cells of wl at
// rate by run.
func abPairs(rep *Report, wl string, rate int) []abPair {
	return abPairsOf(rep, wl, rate, "cronoq-secure")
}

// abPairsOf pairs the successful cells of cronoq and of the cronoq
// variant other (in the secure field) of wl at rate by run.
func abPairsOf(rep *Report, wl string, rate int, other string) []abPair {
	plain := map[int]CellResult{}
	secure := map[int]CellResult{}
	first := map[int]string{}
	for _, c := range rep.Cells {
		if c.Workload != wl || c.Rate != rate || (c.System != "cronoq" && c.System != other) {
			continue
		}
		if first[c.Run] == "" {
			first[c.Run] = c.System
		}
		if c.Error != "" {
			continue
		}
		switch c.System {
		case "cronoq":
			plain[c.Run] = c
		case other:
			secure[c.Run] = c
		}
	}
	var out []abPair
	for run, p := range plain {
		if s, ok := secure[run]; ok {
			out = append(out, abPair{run: run, plain: p, secure: s, first: first[run]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].run < out[j].run })
	return out
}

// medianOf is the median of vs (NaN for none; +Inf counts as the
// largest).
func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ratio is secure / plain, NaN when it has no meaning.
func ratio(secure, plain float64) float64 {
	if plain <= 0 || math.IsInf(plain, 0) || math.IsInf(secure, 0) || math.IsNaN(plain) || math.IsNaN(secure) {
		return math.NaN()
	}
	return secure / plain
}

func fmtRatio(r float64) string {
	if math.IsNaN(r) {
		return "—"
	}
	return fmt.Sprintf("%.3f", r)
}

// renderSecureAB is the run-by-run comparison of cronoq-secure with
// cronoq, "" unless the report has pairs of them.
func renderSecureAB(rep *Report) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	if pairs := abPairs(rep, "w1", 0); len(pairs) > 0 {
		w("### TLS and ACLs — W1, cronoq-secure against cronoq run by run\n\n")
		w("| run | first | cronoq tasks/s | cronoq-secure tasks/s | ratio | cronoq server CPU µs/task | cronoq-secure server CPU µs/task | ratio |\n")
		w("|---:|---|---:|---:|---:|---:|---:|---:|\n")
		var pv, sv, rv, pc, sc, rc []float64
		for _, p := range pairs {
			pr, sr := p.plain.W1.Rate, p.secure.W1.Rate
			pcu := p.plain.ServerCPUs / float64(p.plain.W1.Tasks) * 1e6
			scu := p.secure.ServerCPUs / float64(p.secure.W1.Tasks) * 1e6
			w("| %d | %s | %s | %s | %s | %s | %s | %s |\n", p.run, p.first, fmtNum(jf(pr)), fmtNum(jf(sr)), fmtRatio(ratio(sr, pr)),
				fmtNum(jf(pcu)), fmtNum(jf(scu)), fmtRatio(ratio(scu, pcu)))
			pv, sv, rv = append(pv, pr), append(sv, sr), append(rv, ratio(sr, pr))
			pc, sc, rc = append(pc, pcu), append(sc, scu), append(rc, ratio(scu, pcu))
		}
		w("| **median** | | **%s** | **%s** | **%s** | %s | %s | %s |\n\n", fmtNum(jf(medianOf(pv))), fmtNum(jf(medianOf(sv))), fmtRatio(medianOf(rv)),
			fmtNum(jf(medianOf(pc))), fmtNum(jf(medianOf(sc))), fmtRatio(medianOf(rc)))
	}
	var rates []int
	for _, c := range rep.Cells {
		if c.Workload == "w3" && c.System == "cronoq-secure" && !containsInt(rates, c.Rate) {
			rates = append(rates, c.Rate)
		}
	}
	sort.Ints(rates)
	for _, rate := range rates {
		pairs := abPairs(rep, "w3", rate)
		if len(pairs) == 0 {
			continue
		}
		w("### TLS and ACLs — W3 at %s tasks/s, cronoq-secure against cronoq run by run\n\n", fmtNum(jf(rate)))
		w("| run | first | cronoq p50 ms | cronoq-secure p50 ms | ratio | cronoq p99 ms | cronoq-secure p99 ms | ratio | cronoq server CPU s | cronoq-secure server CPU s | ratio |\n")
		w("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		var p50p, p50s, r50, p99p, p99s, r99, cp, cs, rcpu []float64
		for _, p := range pairs {
			a, s := p.plain.W3, p.secure.W3
			w("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", p.run, p.first,
				fmtMs(a.P50ms), fmtMs(s.P50ms), fmtRatio(ratio(float64(s.P50ms), float64(a.P50ms))),
				fmtMs(a.P99ms), fmtMs(s.P99ms), fmtRatio(ratio(float64(s.P99ms), float64(a.P99ms))),
				fmtSec(jf(p.plain.ServerCPUs)), fmtSec(jf(p.secure.ServerCPUs)), fmtRatio(ratio(p.secure.ServerCPUs, p.plain.ServerCPUs)))
			p50p, p50s, r50 = append(p50p, float64(a.P50ms)), append(p50s, float64(s.P50ms)), append(r50, ratio(float64(s.P50ms), float64(a.P50ms)))
			p99p, p99s, r99 = append(p99p, float64(a.P99ms)), append(p99s, float64(s.P99ms)), append(r99, ratio(float64(s.P99ms), float64(a.P99ms)))
			cp, cs, rcpu = append(cp, p.plain.ServerCPUs), append(cs, p.secure.ServerCPUs), append(rcpu, ratio(p.secure.ServerCPUs, p.plain.ServerCPUs))
		}
		w("| **median** | | **%s** | **%s** | **%s** | **%s** | **%s** | **%s** | %s | %s | %s |\n\n",
			fmtMs(jf(medianOf(p50p))), fmtMs(jf(medianOf(p50s))), fmtRatio(medianOf(r50)),
			fmtMs(jf(medianOf(p99p))), fmtMs(jf(medianOf(p99s))), fmtRatio(medianOf(r99)),
			fmtSec(jf(medianOf(cp))), fmtSec(jf(medianOf(cs))), fmtRatio(medianOf(rcpu)))
	}
	if b.Len() == 0 {
		return ""
	}
	return b.String() + "Ratios are cronoq-secure / cronoq of the same run (below 1 for tasks/s, above 1 for latency and CPU is the cost); " +
		"\"first\" is the system that ran first in that run (the order alternates). The median ratio is the median of the per-run ratios.\n\n"
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
