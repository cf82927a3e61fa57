package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/majorhq/major/mcpserver"
)

// relayStandIn mounts the handler at /mcp the way the relay does: it
// authenticates the bearer token and puts the person into the request
// context. An unknown or missing token passes with no person, so the test
// can see what the tools do then.
func relayStandIn(tb testing.TB, h http.Handler) string {
	tb.Helper()
	persons := map[string]string{"relay-token-seb": "sebastian", "relay-token-petra": "petra"}
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := persons[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]; ok {
			r = r.WithContext(mcpserver.WithPerson(r.Context(), p))
		}
		h.ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

func httpClient(tb testing.TB, url, bearer string) *client.Client {
	tb.Helper()
	var opts []transport.StreamableHTTPCOption
	if bearer != "" {
		opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + bearer}))
	}
	c, err := client.NewStreamableHttpClient(url, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		tb.Fatalf("initialize: %v", err)
	}
	return c
}

func TestHTTPHandler(t *testing.T) {
	t.Parallel()
	// Over HTTP nobody is asked, so only persons who publish
	// automatically may publish there.
	w := newWorld(t, func(c *mcpserver.Config, _ *world) { c.AutoPublish = func(p string) bool { return p == "sebastian" } })
	url := relayStandIn(t, w.srv.HTTPHandler())
	tests := []struct {
		name    string
		bearer  string
		person  string
		wantErr bool
		want    string
	}{
		{name: "sebastian", bearer: "relay-token-seb", person: "sebastian", want: "Posted to LinkedIn: urn:li:share:"},
		{name: "petra needs approval", bearer: "relay-token-petra", person: "petra", wantErr: true, want: "Error: publishing to LinkedIn from the HTTP MCP endpoint (/mcp) needs approval"},
		{name: "no person in context", wantErr: true, want: "Error: no person is attached to this call"},
		{name: "unknown bearer", bearer: "stolen", wantErr: true, want: "Error: no person is attached to this call"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := httpClient(t, url, tt.bearer)
			tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
			if err != nil || len(tools.Tools) != 4 {
				t.Fatalf("list tools: %v %v", tools, err)
			}
			before := len(w.api.Requests())
			var req mcp.CallToolRequest
			req.Params.Name = mcpserver.ToolPost
			req.Params.Arguments = map[string]any{"text": "over http by " + tt.name}
			res, err := c.CallTool(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			text := resultText(t, res)
			if res.IsError != tt.wantErr || !strings.Contains(text, tt.want) {
				t.Fatalf("isError=%v text=%q", res.IsError, text)
			}
			reqs := w.api.Requests()[before:]
			if tt.wantErr {
				if len(reqs) != 0 {
					t.Fatalf("LinkedIn called: %+v", reqs)
				}
				return
			}
			if len(reqs) != 1 || reqs[0].Token != accounts[tt.person].AccessToken || reqs[0].Body["author"] != accounts[tt.person].Author {
				t.Fatalf("LinkedIn saw %+v", reqs)
			}
			if log := w.activity(t, tt.person); !strings.Contains(log, `"over http by `+tt.name+`"`) {
				t.Fatalf("activity log of %s:\n%s", tt.person, log)
			}
		})
	}
}
