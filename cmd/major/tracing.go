package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// setupTracing is the tracer the turns' traces go to: an OTLP exporter
// (HTTP, protobuf) when the server's environment names an endpoint with
// the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT, or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT for the full URL;
// OTEL_EXPORTER_OTLP_HEADERS, e.g. Langfuse's Authorization), nil
// otherwise. stop flushes what is buffered, within ctx.
func setupTracing(getenv func(string) string, version string) (tracer trace.Tracer, stop func(ctx context.Context) error, err error) {
	var opts []otlptracehttp.Option
	switch {
	case getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		opts = append(opts, otlptracehttp.WithEndpointURL(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")))
	case getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "/")+"/v1/traces"))
	default:
		return nil, nil, nil
	}
	if p := getenv("OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" && p != "http/protobuf" {
		return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: only http/protobuf is spoken", p)
	}
	if h := getenv("OTEL_EXPORTER_OTLP_HEADERS"); h != "" {
		headers := map[string]string{}
		for _, kv := range strings.Split(h, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %q is not key=value", kv)
			}
			if dv, err := url.QueryUnescape(strings.TrimSpace(v)); err == nil {
				v = dv
			}
			headers[strings.TrimSpace(k)] = v
		}
		opts = append(opts, otlptracehttp.WithHeaders(headers))
	}
	exporter, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	batch := []sdktrace.BatchSpanProcessorOption{}
	if d := getenv("OTEL_BSP_SCHEDULE_DELAY"); d != "" {
		ms, err := strconv.Atoi(d)
		if err != nil || ms <= 0 {
			return nil, nil, fmt.Errorf("OTEL_BSP_SCHEDULE_DELAY=%q: milliseconds, more than 0", d)
		}
		batch = append(batch, sdktrace.WithBatchTimeout(time.Duration(ms)*time.Millisecond))
	}
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter, batch...),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("major"), semconv.ServiceVersion(version))),
	)
	return provider.Tracer("github.com/majorhq/major"), provider.Shutdown, nil
}
