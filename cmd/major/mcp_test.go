package main

import (
	"context"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/majorhq/major/mcpserver"
)

// mcpCall calls one tool over real HTTP at the server's /mcp, as person,
// and returns the result's text and isError.
func mcpCall(tb testing.TB, s *server, person, tool string, args map[string]any) (string, bool) {
	tb.Helper()
	c, err := client.NewStreamableHttpClient(s.url+"/mcp", transport.WithHTTPHeaders(map[string]string{
		"Authorization": "Bearer " + testToken, "X-Notes-Person": person,
	}))
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
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
	var req mcp.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		tb.Fatalf("call %s: %v", tool, err)
	}
	var text []string
	for _, part := range res.Content {
		if t, ok := part.(mcp.TextContent); ok {
			text = append(text, t.Text)
		}
	}
	return strings.Join(text, "\n"), res.IsError
}

// TestMCPEndpointNeedsApprovalToPublish: a token holder at /mcp cannot
// publish for a person whose publishing needs approval (nobody is there
// to ask); reading still works, and a person set to publish automatically
// publishes there as in a chat.
func TestMCPEndpointNeedsApprovalToPublish(t *testing.T) {
	t.Parallel()
	s := start(t)
	publishing := []struct {
		tool string
		args map[string]any
	}{
		{mcpserver.ToolPost, map[string]any{"text": "unapproved"}},
		{mcpserver.ToolPostComment, map[string]any{"post_urn": "urn:li:share:1", "text": "unapproved"}},
		{mcpserver.ToolReplyComment, map[string]any{"post_urn": "urn:li:share:1", "comment_urn": "urn:li:comment:(urn:li:activity:1,2)", "text": "unapproved"}},
	}
	for _, p := range publishing {
		text, isErr := mcpCall(t, s, "sebastian", p.tool, p.args)
		if !isErr || !strings.Contains(text, "publishing to LinkedIn from the HTTP MCP endpoint (/mcp) needs approval") {
			t.Errorf("%s: isError=%v text=%q", p.tool, isErr, text)
		}
	}
	if reqs := s.li.Requests(); len(reqs) != 0 {
		t.Fatalf("LinkedIn was called without approval: %+v", reqs)
	}
	text, isErr := mcpCall(t, s, "sebastian", mcpserver.ToolReadComments, map[string]any{"post_urn": "urn:li:share:1"})
	if isErr || !strings.Contains(text, "No comments on urn:li:share:1") {
		t.Fatalf("reading: isError=%v text=%q", isErr, text)
	}

	auto := start(t, "--linkedin-auto-publish", "sebastian")
	text, isErr = mcpCall(t, auto, "sebastian", mcpserver.ToolPost, map[string]any{"text": "automatic"})
	if isErr || !strings.HasPrefix(text, "Posted to LinkedIn: urn:li:share:") {
		t.Fatalf("auto-publish over /mcp: isError=%v text=%q", isErr, text)
	}
	if reqs := auto.li.Requests(); len(reqs) != 1 || reqs[0].Body["commentary"] != "automatic" {
		t.Fatalf("LinkedIn got %+v", reqs)
	}
}
