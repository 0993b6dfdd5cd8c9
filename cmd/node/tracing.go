package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// traceConfig is the OTLP trace export of a node or a worker: off unless
// an endpoint is given.
type traceConfig struct {
	endpoint string  // HOST:PORT or a URL; "" = no tracing
	insecure bool    // plain HTTP to HOST:PORT
	ratio    float64 // of the traces continued, the share recorded
}

// defaultTraceRatio records every trace a task continues.
const defaultTraceRatio = 1.0

// traceShutdownTimeout bounds the flush of the spans left at exit.
const traceShutdownTimeout = 5 * time.Second

// traceFlags registers -otlp-endpoint, -otlp-insecure and
// -trace-sample-ratio on fs, bound to tc; what names what is traced in
// their help.
func traceFlags(fs *flag.FlagSet, tc *traceConfig, what string) {
	fs.StringVar(&tc.endpoint, "otlp-endpoint", tc.endpoint,
		"export OpenTelemetry spans of "+what+" over OTLP/HTTP to `ENDPOINT`: HOST:PORT of a collector (to /v1/traces, over HTTPS unless -otlp-insecure) or a URL (http:// or https://, its path or /v1/traces); default: no tracing")
	fs.BoolVar(&tc.insecure, "otlp-insecure", tc.insecure, "with -otlp-endpoint HOST:PORT: export over plain HTTP")
	fs.Var(ratioValue{&tc.ratio}, "trace-sample-ratio",
		"with -otlp-endpoint: record this share `R` (0 to 1) of the traces that tasks continue, chosen by trace id so that nodes and workers agree (a trace whose caller did not sample it is never recorded)")
}

// ratioValue is a flag of a number in [0, 1].
type ratioValue struct{ r *float64 }

func (v ratioValue) String() string {
	if v.r == nil {
		return ""
	}
	return strconv.FormatFloat(*v.r, 'g', -1, 64)
}

func (v ratioValue) Set(s string) error {
	r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || r < 0 || r > 1 {
		return errors.New("want a number from 0 to 1")
	}
	*v.r = r
	return nil
}

// exporterOptions are the OTLP/HTTP options of tc's endpoint.
func (tc traceConfig) exporterOptions() ([]otlptracehttp.Option, error) {
	const path = "/v1/traces"
	if !strings.Contains(tc.endpoint, "://") {
		if _, _, err := net.SplitHostPort(tc.endpoint); err != nil {
			return nil, fmt.Errorf("invalid -otlp-endpoint %q: want HOST:PORT or an http:// or https:// URL", tc.endpoint)
		}
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(tc.endpoint), otlptracehttp.WithURLPath(path)}
		if tc.insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		return opts, nil
	}
	u, err := url.Parse(tc.endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("invalid -otlp-endpoint %q: want HOST:PORT or an http:// or https:// URL", tc.endpoint)
	}
	if tc.insecure && u.Scheme == "https" {
		return nil, fmt.Errorf("-otlp-insecure contradicts -otlp-endpoint %q: an https URL", tc.endpoint)
	}
	p := u.Path
	if p == "" || p == "/" {
		p = path
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host), otlptracehttp.WithURLPath(p)}
	if u.Scheme == "http" {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	return opts, nil
}

// validate checks the endpoint's form.
func (tc traceConfig) validate() error {
	if tc.endpoint == "" {
		return nil
	}
	_, err := tc.exporterOptions()
	return err
}

// sampler records the share ratio of the traces, by trace id, of those
// whose caller sampled them; a trace its caller did not sample is never
// recorded. Every node and worker with the same ratio decides alike.
func sampler(ratio float64) sdktrace.Sampler {
	byID := sdktrace.TraceIDRatioBased(ratio)
	return sdktrace.ParentBased(byID, sdktrace.WithRemoteParentSampled(byID))
}

// tracerProvider starts the trace export tc asks for, with the resource
// attributes attrs (service.name and the like; OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES win). It returns nil when tracing is off; the
// caller shuts the provider down, which flushes the spans left. Export
// errors are logged on log.
func (tc traceConfig) tracerProvider(ctx context.Context, log hclog.Logger, attrs ...attribute.KeyValue) (*sdktrace.TracerProvider, error) {
	if tc.endpoint == "" {
		return nil, nil
	}
	opts, err := tc.exporterOptions()
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating the OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil {
		// A partial resource (an unreadable host name) still serves.
		log.Warn("tracing: resource attributes incomplete", "error", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: export failed", "error", err) }))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sampler(tc.ratio)))
	log.Info("tracing: exporting spans over OTLP/HTTP", "endpoint", tc.endpoint, "sample_ratio", tc.ratio)
	return tp, nil
}

// shutdownTracing flushes and stops tp (nil: nothing to do).
func shutdownTracing(tp *sdktrace.TracerProvider, log hclog.Logger) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), traceShutdownTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("tracing: flushing the last spans", "error", err)
	}
}
