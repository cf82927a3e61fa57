package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/gateway"
)

// BenchmarkGatewayStream times reading one streamed answer (2,000 text
// deltas, each event flushed on its own, as the API sends them) through
// the gateway, against reading the same answer from the upstream directly,
// in the same loop, both over loopback HTTP. x-baseline is gateway time
// over direct time: what swapping the token, metering and proxying cost.
func BenchmarkGatewayStream(b *testing.B) {
	var events []string
	events = append(events, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":1200,\"output_tokens\":1}}}\n\n")
	for i := range 2000 {
		events = append(events, fmt.Sprintf("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"word %04d of a streamed answer \"}}\n\n", i))
	}
	events = append(events, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":4000}}\n\n",
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	size := len(strings.Join(events, ""))
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for _, e := range events {
			_, _ = io.WriteString(w, e)
			f.Flush()
		}
	}))
	defer up.Close()
	var recorded atomic.Int64
	gw, err := gateway.New(gateway.Config{Upstream: up.URL, Credential: gateway.APIKey(realKey), Logger: zerolog.Nop(),
		Record: func(r gateway.Request) {
			if r.Usage.OutputTokens == 4000 && r.Complete {
				recorded.Add(1)
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer gw.Close()
	srv := httptest.NewServer(gw)
	defer srv.Close()
	token := gw.Issue("sebastian", "bench")
	body := `{"model":"claude-sonnet-4-5","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	read := func(url string) time.Duration {
		req, _ := http.NewRequest("POST", url+"/v1/messages", strings.NewReader(body))
		req.Header.Set("x-api-key", token)
		t0 := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		if err != nil || n != int64(size) {
			b.Fatalf("read %d of %d bytes: %v", n, size, err)
		}
		return d
	}
	var through, direct time.Duration
	runs := 0
	for b.Loop() {
		direct += read(up.URL)
		through += read(srv.URL)
		runs++
	}
	if n := recorded.Load(); n != int64(runs) {
		b.Fatalf("%d of %d answers recorded complete", n, runs)
	}
	b.SetBytes(int64(size))
	b.ReportMetric(float64(through)/float64(direct), "x-baseline")
}
