package gateway_test

import (
	"fmt"
	"testing"

	"github.com/majorhq/major/gateway"
)

// The cost the gateway records for a request is, to the last bit, the
// total_cost_usd the real CLI reports for the same request: for each
// model of the price table (and ones the CLI does not know), with every
// kind of token, hour-long cache writes, web searches, US inference and
// fast mode.
func TestPricesMatchCLI(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil, nil)
	token := w.gw.Issue("sebastian", "prices")
	const all = `"input_tokens":12345,"cache_creation_input_tokens":67890,"cache_creation":{"ephemeral_1h_input_tokens":2345,"ephemeral_5m_input_tokens":65545},"cache_read_input_tokens":345678,"output_tokens":4567,"server_tool_use":{"web_search_requests":3}`
	for i, tc := range []struct {
		model, usage string
	}{
		{"claude-opus-4-6", all},
		{"claude-opus-4-5-20251101", all},
		{"claude-opus-4-1-20250805", all}, // the CLI asks for claude-opus-5-5 instead
		{"claude-opus-4", all},
		{"claude-opus-5-5", all},
		{"claude-sonnet-4-6", all},
		{"claude-sonnet-4-5-20250929", all},
		{"claude-sonnet-4-20250514", all},
		{"claude-sonnet-5", all},
		{"claude-3-7-sonnet-20250219", all},
		{"claude-haiku-4-5-20251001", all},
		{"claude-3-5-haiku-20241022", all},
		{"claude-haiku-5-5", all}, // a long prompt: its higher prices
		{"claude-haiku-5-5", `"input_tokens":5000,"output_tokens":300`},
		{"some-unknown-model", all},
		{"claude-3-opus-20240229", all},
		{"claude-opus-4-6", all + `,"speed":"fast"`},
		{"claude-sonnet-4-5", all + `,"speed":"fast"`}, // no fast price: the standard one
		{"claude-opus-5-5", all + `,"speed":"fast","inference_geo":"us"`},
		{"claude-sonnet-4-5", all + `,"inference_geo":"us"`},
	} {
		t.Run(fmt.Sprintf("%02d %s", i, tc.model), func(t *testing.T) {
			res := w.print(t, token, tc.model, "[[usage {"+tc.usage+"}]]")
			if res.IsError || res.TotalCostUSD == nil {
				t.Fatalf("result %+v", res)
			}
			r := w.next(t)
			if r.CostUSD != *res.TotalCostUSD {
				t.Fatalf("the gateway counted %v USD for %s (%s), the CLI %v USD", r.CostUSD, r.Model, gateway.Canonical(r.Model), *res.TotalCostUSD)
			}
			if rest := w.drain(); len(rest) != 0 {
				t.Fatalf("more requests than one: %+v", rest)
			}
		})
	}
}

// Model names find their catalog entry as the CLI finds them (the names
// the CLI sends, and the canonicalModel it reports for them).
func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"claude-opus-4-6", "claude-opus-4-6"},
		{"claude-opus-4-6[1m]", "claude-opus-4-6"},
		{"CLAUDE-SONNET-4-5", "claude-sonnet-4-5"},
		{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5"},
		{"claude-sonnet-4-5@20250929", "claude-sonnet-4-5"},
		{"us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"},
		{"claude-sonnet-4-6-20990101", "claude-sonnet-4-6"},
		{"claude-opus-4-7-foo", "claude-opus-4-7"},
		{"claude-opus-4", "claude-opus-4-0"},
		{"claude-opus-4-20250514", "claude-opus-4-0"},
		{"claude-opus-4-0", "claude-opus-4-0"},
		{"claude-opus-4-1-20250805", "claude-opus-4-1"},
		{"claude-sonnet-4-20250514", "claude-sonnet-4-0"},
		{"claude-opus-5-5", "claude-opus-5-5"},
		{"claude-opus-5", "claude-opus-5"},
		{"claude-3-5-sonnet-latest", "claude-3-5-sonnet"},
		{"claude-3-5-haiku-20241022", "claude-3-5-haiku"},
		{"claude-fable-5-2", "claude-fable-5-2"},
		{"claude-3-opus-20240229", ""},
		{"some-unknown-model", ""},
		{"", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gateway.Canonical(tc.name); got != tc.want {
				t.Fatalf("Canonical(%q) = %q, want %q", tc.name, got, tc.want)
			}
		})
	}
}

// A price given in the configuration replaces the built-in one.
func TestPriceOverride(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil, func(c *gateway.Config) {
		c.Prices = map[string]gateway.Price{"claude-sonnet-4-5": {Input: 100, Output: 1000}}
	})
	resp := do(t, "POST", w.url+"/v1/messages", "x-api-key", w.gw.Issue("petra", "p"),
		`{"model":"claude-sonnet-4-5-20250929","messages":[{"role":"user","content":"[[cost 1000]]"}]}`)
	if resp.status != 200 {
		t.Fatalf("%d %s", resp.status, resp.body)
	}
	// 1000 input and 10 output tokens.
	if r := w.next(t); r.CostUSD != 1000/1e6*100+10/1e6*1000 || r.Usage.InputTokens != 1000 || !r.Complete {
		t.Fatalf("recorded %+v", r)
	}
}
