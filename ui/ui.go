// Package ui is the web console every node serves under /ui/: pages of the
// cluster, its pools, tasks, workflows and recurring schedules, rendered on
// the server from Go templates (readable without JavaScript), with a small
// script that refreshes them live from the event stream (GET /ui/events,
// Server-Sent Events).
//
// The console reaches the cluster only through the Go SDK, as any client
// does: Config.NewClient returns a client of the node's own API, so a page
// served by a follower reads the follower's replica and its writes (pause,
// resume, cancel, retry) are routed to the leader like any API call. The
// ACL token a user enters in the page is kept in a cookie and every call
// made for that user carries it (the API's X-Cronoq-Token header).
package ui

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/cronoq/cronoq/client"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// TokenCookie is the cookie that keeps the ACL token entered in the page.
const TokenCookie = "cronoq_token"

// callTimeout bounds the API calls made to render one page or to do one
// action.
const callTimeout = 10 * time.Second

// leaderReadTimeout bounds the read through the leader of a page that can
// fall back to this node's replica, so that the fallback has the rest of
// callTimeout when there is no leader to ask.
const leaderReadTimeout = callTimeout / 2

// maxClients bounds the SDK clients kept, one per token in use; the least
// recently used is closed beyond it.
const maxClients = 32

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures a Console.
type Config struct {
	// NewClient returns an SDK client of the node's own API that carries
	// token (none when empty). Required. The console closes the clients it
	// made when it closes.
	NewClient func(token string) (*client.Client, error)
	// Node names the node serving the console, for the page titles.
	Node string
	// Logger (default: none).
	Logger hclog.Logger
}

// Console is the web console: an http.Handler for the paths under Prefix.
// Close it after the HTTP server that serves it has stopped.
type Console struct {
	cfg   Config
	log   hclog.Logger
	mux   *http.ServeMux
	pages map[string]*template.Template

	mu      sync.Mutex
	clients map[string]*cachedClient
	uses    uint64 // counts clientFor calls: the clients' use order
	closed  bool
}

type cachedClient struct {
	c        *client.Client
	lastUsed uint64 // the value of uses when last used
}

// New returns a console.
func New(cfg Config) (*Console, error) {
	if cfg.NewClient == nil {
		return nil, errors.New("creating the console: Config.NewClient is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("creating the console: %w", err)
	}
	c := &Console{cfg: cfg, log: cfg.Logger, pages: pages, clients: map[string]*cachedClient{}}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, fmt.Errorf("creating the console: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", cacheStatic(http.FileServerFS(static))))
	mux.HandleFunc("GET /ui/{$}", c.page(c.clusterPage))
	mux.HandleFunc("GET /ui/pools", c.page(c.poolsPage))
	mux.HandleFunc("POST /ui/pools/{name}/{action}", c.action(c.poolAction))
	mux.HandleFunc("GET /ui/tasks", c.page(c.tasksPage))
	mux.HandleFunc("GET /ui/tasks/{id}", c.page(c.taskPage))
	mux.HandleFunc("POST /ui/tasks/{id}/{action}", c.action(c.taskAction))
	mux.HandleFunc("GET /ui/workflows", c.page(c.workflowsPage))
	mux.HandleFunc("GET /ui/workflows/{id}", c.page(c.workflowPage))
	mux.HandleFunc("POST /ui/workflows/{id}/{action}", c.action(c.workflowAction))
	mux.HandleFunc("GET /ui/schedules", c.page(c.schedulesPage))
	mux.HandleFunc("POST /ui/schedules/{name}/{action}", c.action(c.scheduleAction))
	mux.HandleFunc("POST /ui/token", c.setToken)
	mux.HandleFunc("GET /ui/events", c.serveEvents)
	c.mux = mux
	return c, nil
}

// ServeHTTP serves the console's paths.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/ui" {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; img-src 'self' data:; script-src 'self'; frame-ancestors 'none'")
	c.mux.ServeHTTP(w, r)
}

// Close closes the SDK clients the console made. Pages served after it
// answer with an error.
func (c *Console) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for tok, cc := range c.clients {
		errs = append(errs, cc.c.Close())
		delete(c.clients, tok)
	}
	return errors.Join(errs...)
}

func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// token returns the ACL token of the request: its cookie.
func token(r *http.Request) string {
	ck, err := r.Cookie(TokenCookie)
	if err != nil {
		return ""
	}
	v, err := url.QueryUnescape(ck.Value)
	if err != nil {
		return ""
	}
	return v
}

// clientFor returns the SDK client of the request's token.
func (c *Console) clientFor(r *http.Request) (*client.Client, error) {
	tok := token(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("the console is shut down")
	}
	c.uses++
	if cc, ok := c.clients[tok]; ok {
		cc.lastUsed = c.uses
		return cc.c, nil
	}
	cl, err := c.cfg.NewClient(tok)
	if err != nil {
		return nil, fmt.Errorf("connecting to the node's API: %w", err)
	}
	if len(c.clients) >= maxClients {
		var (
			oldest string
			at     uint64
			found  bool
		)
		for k, cc := range c.clients {
			if !found || cc.lastUsed < at {
				oldest, at, found = k, cc.lastUsed, true
			}
		}
		if old, ok := c.clients[oldest]; ok {
			_ = old.c.Close()
			delete(c.clients, oldest)
		}
	}
	c.clients[tok] = &cachedClient{c: cl, lastUsed: c.uses}
	return cl, nil
}

// sameOrigin refuses a form posted from another site: the token cookie is
// SameSite=Strict, and the Origin (or Sec-Fetch-Site) header, when the
// browser sends one, must name this host.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return origin == ""
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// setToken keeps the token posted (or forgets it when empty) in a cookie
// and goes back to the page it was posted from.
func (c *Console) setToken(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "refused: the form was posted from another site", http.StatusForbidden)
		return
	}
	tok := strings.TrimSpace(r.PostFormValue("token"))
	ck := &http.Cookie{
		Name: TokenCookie, Value: url.QueryEscape(tok), Path: Prefix,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	}
	if tok == "" {
		ck.MaxAge = -1
	}
	http.SetCookie(w, ck)
	http.Redirect(w, r, backTo(r.PostFormValue("next")), http.StatusSeeOther)
}

// backTo returns next when it is a path of the console, else the console's
// front page.
func backTo(next string) string {
	if strings.HasPrefix(next, Prefix) && !strings.HasPrefix(next, "//") && !strings.Contains(next, "\\") {
		return next
	}
	return Prefix
}

// pageData is what every page's template gets.
type pageData struct {
	Title string
	Nav   string
	Node  string
	// Scheme is the request's, for links to the other nodes' consoles.
	Scheme  string
	HasAuth bool
	Path    string
	// Live tells the script how to refresh the page: "events" (on events
	// of the pools in LivePools, or all), "poll" (every few seconds).
	Live      string
	LivePools []string
	// LiveTask and LiveWorkflow restrict the refresh to events of one task
	// or workflow.
	LiveTask     string
	LiveWorkflow string
	Error        string
	Flash        string
	Data         any
}

// pageFunc fills a page's data. It returns the template's name.
type pageFunc func(ctx context.Context, cl *client.Client, r *http.Request, p *pageData) (string, error)

// page wraps a pageFunc into a handler: it makes the client of the
// request's token, bounds the calls, and renders the template, or the
// error in the page's frame.
func (c *Console) page(fn pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := &pageData{Node: c.cfg.Node, Scheme: scheme(r), HasAuth: token(r) != "", Path: r.URL.RequestURI(), Flash: r.URL.Query().Get("done")}
		cl, err := c.clientFor(r)
		name := "error"
		if err == nil {
			ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
			name, err = fn(ctx, cl, r, p)
			cancel()
		}
		code := http.StatusOK
		if err != nil {
			code = errorCode(err)
			p.Error = err.Error()
			if name == "" {
				name = "error"
			}
		}
		c.render(w, code, name, p)
	}
}

// actionFunc does a write and returns the path to go back to.
type actionFunc func(ctx context.Context, cl *client.Client, r *http.Request) (next, done string, err error)

// action wraps an actionFunc into a handler of a form post: on success it
// redirects (303) to the page the action returns; on an error it renders
// the error.
func (c *Console) action(fn actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := &pageData{Node: c.cfg.Node, Scheme: scheme(r), HasAuth: token(r) != "", Path: r.URL.RequestURI(), Title: "Error"}
		if !sameOrigin(r) {
			p.Error = "refused: the form was posted from another site"
			c.render(w, http.StatusForbidden, "error", p)
			return
		}
		cl, err := c.clientFor(r)
		if err == nil {
			ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
			var next, done string
			next, done, err = fn(ctx, cl, r)
			cancel()
			if err == nil {
				u := backTo(next)
				if done != "" {
					sep := "?"
					if strings.Contains(u, "?") {
						sep = "&"
					}
					u += sep + "done=" + url.QueryEscape(done)
				}
				http.Redirect(w, r, u, http.StatusSeeOther)
				return
			}
		}
		p.Error = err.Error()
		c.render(w, errorCode(err), "error", p)
	}
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// errorCode maps an error of the SDK to an HTTP status.
func errorCode(err error) int {
	switch {
	case errors.Is(err, client.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, client.ErrPermissionDenied):
		return http.StatusForbidden
	case errors.Is(err, client.ErrInvalid), errors.Is(err, errBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, client.ErrNotRetryable):
		return http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, client.ErrNoLeader):
		return http.StatusServiceUnavailable
	}
	return http.StatusBadGateway
}

var errBadRequest = errors.New("bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

func (c *Console) render(w http.ResponseWriter, code int, name string, p *pageData) {
	t, ok := c.pages[name]
	if !ok {
		http.Error(w, "no page "+name, http.StatusInternalServerError)
		return
	}
	var buf strings.Builder
	if err := t.ExecuteTemplate(&buf, "layout", p); err != nil {
		c.log.Error("rendering a console page", "page", name, "error", err)
		http.Error(w, "rendering the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(buf.String()))
}
