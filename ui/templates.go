package ui

import (
	"encoding/base64"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// maxShownBytes bounds the bytes of a payload or an output shown in a page.
const maxShownBytes = 256 << 10

// bytesView is a payload or an output as a page shows it: text when the
// bytes are UTF-8, else base64.
type bytesView struct {
	Text   string
	Base64 bool
	Size   int
	// Cut says only the first maxShownBytes are shown.
	Cut bool
}

func viewBytes(b []byte) bytesView {
	v := bytesView{Size: len(b)}
	shown := b
	if len(shown) > maxShownBytes {
		shown, v.Cut = shown[:maxShownBytes], true
	}
	if utf8.Valid(b) {
		if v.Cut {
			// Cut on a rune boundary.
			for len(shown) > 0 && !utf8.Valid(shown) {
				shown = shown[:len(shown)-1]
			}
		}
		v.Text = string(shown)
		return v
	}
	v.Base64 = true
	v.Text = base64.StdEncoding.EncodeToString(shown)
	return v
}

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"iso": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return humanDuration(time.Since(t))
	},
	"dur": func(d time.Duration) string {
		if d <= 0 {
			return "—"
		}
		return humanDuration(d)
	},
	"count": func(m map[string]int64, k string) int64 { return m[k] },
	"kv": func(m map[string]string) string {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, k+"="+m[k])
		}
		return strings.Join(parts, " ")
	},
	"join": strings.Join,
	"kib":  func(n int) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) },
	"short": func(id string) string {
		if len(id) > 12 {
			return id[:12] + "…"
		}
		return id
	},
	"limit": func(n int64) string {
		if n <= 0 {
			return "none"
		}
		return fmt.Sprint(n)
	},
	"rate": func(r float64, burst int64) string {
		if r <= 0 {
			return "none"
		}
		return fmt.Sprintf("%g/s burst %d", r, burst)
	},
	"add": func(a, b int) int { return a + b },
}

// humanDuration shows d to the second (or millisecond below one second).
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "in " + humanDuration(-d)
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// parsePages parses each page's template with the layout.
func parsePages() (map[string]*template.Template, error) {
	layout, err := template.New("layout").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("parsing the layout: %w", err)
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, fmt.Errorf("parsing page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}
