package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progress draws one updating line on stderr: which cell of how many, what
// it is doing, a bar of its progress and the elapsed times. Notes are
// printed above it. When stderr is not a terminal it prints a plain line
// every 15 seconds instead.
type progress struct {
	mu        sync.Mutex
	out       io.Writer
	tty       bool
	start     time.Time
	cellStart time.Time
	cells     int
	cellIdx   int
	title     string
	what      string
	cur       *atomic.Int64
	total     int64
	stop      chan struct{}
	stopped   chan struct{}
	drawn     bool
	lastPlain time.Time
}

func newProgress(w *os.File) *progress {
	p := &progress{out: w, start: time.Now(), cellStart: time.Now(), stop: make(chan struct{}), stopped: make(chan struct{})}
	if st, err := w.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		p.tty = true
	}
	go p.loop()
	return p
}

func (p *progress) loop() {
	defer close(p.stopped)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			p.drawLocked()
			p.mu.Unlock()
		}
	}
}

func (p *progress) setCells(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cells = n
}

func (p *progress) startCell(i int, title string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cellIdx, p.title, p.what, p.cur, p.total = i, title, "", nil, 0
	p.cellStart = time.Now()
	if !p.tty {
		fmt.Fprintf(p.out, "[%d/%d] %s\n", i+1, p.cells, title)
		p.lastPlain = time.Now()
	}
}

// phase names what the cell is doing, without a count.
func (p *progress) phase(what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.what, p.cur, p.total = what, nil, 0
	p.drawLocked()
}

// track shows cur out of total (total 0: a running count).
func (p *progress) track(what string, cur *atomic.Int64, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.what, p.cur, p.total = what, cur, total
	p.drawLocked()
}

func (p *progress) trackCount(what string, cur *atomic.Int64, total int64) { p.track(what, cur, total) }

// note prints a line above the bar.
func (p *progress) note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	fmt.Fprintf(p.out, format+"\n", args...)
	p.drawLocked()
}

func (p *progress) clearLocked() {
	if p.tty && p.drawn {
		fmt.Fprint(p.out, "\r\x1b[K")
		p.drawn = false
	}
}

func (p *progress) drawLocked() {
	if p.cells == 0 && p.what == "" {
		return
	}
	line := p.lineLocked()
	if p.tty {
		fmt.Fprint(p.out, "\r\x1b[K"+line)
		p.drawn = true
		return
	}
	if time.Since(p.lastPlain) >= 15*time.Second {
		fmt.Fprintln(p.out, line)
		p.lastPlain = time.Now()
	}
}

func (p *progress) lineLocked() string {
	var b strings.Builder
	if p.cells > 0 {
		fmt.Fprintf(&b, "[%d/%d] %s", p.cellIdx+1, p.cells, p.title)
	}
	if p.what != "" {
		if b.Len() > 0 {
			b.WriteString(" · ")
		}
		b.WriteString(p.what)
	}
	if p.cur != nil {
		c := p.cur.Load()
		if p.total > 0 {
			const width = 24
			frac := min(float64(c)/float64(p.total), 1)
			fill := int(frac * width)
			fmt.Fprintf(&b, " ▕%s%s▏ %s/%s", strings.Repeat("█", fill), strings.Repeat("░", width-fill), human(c), human(p.total))
		} else {
			fmt.Fprintf(&b, " %s", human(c))
		}
	}
	fmt.Fprintf(&b, "  cell %s  total %s", clock(time.Since(p.cellStart)), clock(time.Since(p.start)))
	return b.String()
}

func (p *progress) finish() {
	p.mu.Lock()
	select {
	case <-p.stop:
		p.mu.Unlock()
		return
	default:
	}
	close(p.stop)
	p.clearLocked()
	p.mu.Unlock()
	<-p.stopped
}

func human(n int64) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprintf("%d", n)
}

func clock(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}
