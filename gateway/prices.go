package gateway

import "strings"

// Price is what a model costs, as the Claude Code CLI counts it: token
// prices in USD per million tokens, web searches in USD per request.
type Price struct {
	Input  float64
	Output float64
	// CacheWrite is the price of a prompt cache write that lives five
	// minutes; CacheWrite1h of one that lives an hour.
	CacheWrite   float64
	CacheWrite1h float64
	CacheRead    float64
	WebSearch    float64
	// LongPrompt, when set, replaces the token prices of a request whose
	// prompt (input, cache write and cache read tokens together) is longer
	// than LongPromptAbove tokens.
	LongPrompt      *Price
	LongPromptAbove int64
	// Fast, when set, is the price of a request the API served in fast
	// mode (usage speed "fast").
	Fast *Price
}

// The prices below are the ones the pinned CLI (2.1.332) charges: its
// baked-in model catalog (pricing_tiers and each model's tier), its
// fast-mode table, and what it reports as total_cost_usd, checked for
// every model of prices_test.go by running the CLI against the scripted
// model (TestPricesMatchCLI). A new CLI with new models or prices needs
// this table updated; that test says which model disagrees.
var (
	tier2x10        = Price{Input: 2, Output: 10, CacheWrite: 2.5, CacheWrite1h: 4, CacheRead: 0.2, WebSearch: webSearch}
	tier2x10read010 = Price{Input: 2, Output: 10, CacheWrite: 2.5, CacheWrite1h: 4, CacheRead: 0.1, WebSearch: webSearch}
	tier3x15        = Price{Input: 3, Output: 15, CacheWrite: 3.75, CacheWrite1h: 6, CacheRead: 0.3, WebSearch: webSearch}
	tier5x25        = Price{Input: 5, Output: 25, CacheWrite: 6.25, CacheWrite1h: 10, CacheRead: 0.5, WebSearch: webSearch}
	tier15x75       = Price{Input: 15, Output: 75, CacheWrite: 18.75, CacheWrite1h: 30, CacheRead: 1.5, WebSearch: webSearch}
	tier10x50       = Price{Input: 10, Output: 50, CacheWrite: 12.5, CacheWrite1h: 20, CacheRead: 1, WebSearch: webSearch}
	tier10x50read25 = Price{Input: 10, Output: 50, CacheWrite: 12.5, CacheWrite1h: 20, CacheRead: 0.25, WebSearch: webSearch}
	tier4x20read020 = Price{Input: 4, Output: 20, CacheWrite: 5, CacheWrite1h: 8, CacheRead: 0.2, WebSearch: webSearch}
	tier8x40read020 = Price{Input: 8, Output: 40, CacheWrite: 10, CacheWrite1h: 16, CacheRead: 0.2, WebSearch: webSearch}
	haiku35         = Price{Input: 0.8, Output: 4, CacheWrite: 1, CacheWrite1h: 1.6, CacheRead: 0.08, WebSearch: webSearch}
	haiku45         = Price{Input: 1, Output: 5, CacheWrite: 1.25, CacheWrite1h: 2, CacheRead: 0.1, WebSearch: webSearch}
	haiku55         = Price{Input: 0.1, Output: 0.5, CacheWrite: 0.125, CacheWrite1h: 0.2, CacheRead: 0.01, WebSearch: webSearch,
		LongPromptAbove: 100_000,
		LongPrompt:      &Price{Input: 0.5, Output: 2.5, CacheWrite: 0.625, CacheWrite1h: 1, CacheRead: 0.05, WebSearch: webSearch}}

	// Fast mode, from the CLI's own table (it is not in the catalog).
	fast30x150 = &Price{Input: 30, Output: 150, CacheWrite: 37.5, CacheWrite1h: 60, CacheRead: 3, WebSearch: webSearch}
	fast10x50  = &Price{Input: 10, Output: 50, CacheWrite: 12.5, CacheWrite1h: 20, CacheRead: 1, WebSearch: webSearch}
	fast8x40   = &Price{Input: 8, Output: 40, CacheWrite: 10, CacheWrite1h: 16, CacheRead: 0.4, WebSearch: webSearch}
	fast16x80  = &Price{Input: 16, Output: 80, CacheWrite: 20, CacheWrite1h: 32, CacheRead: 0.4, WebSearch: webSearch}
)

// webSearch is $10 per 1,000 searches, for every model.
const webSearch = 0.01

// usGeoFactor is what the CLI multiplies token costs by (not web searches)
// when the API reports inference_geo "us".
const usGeoFactor = 1.1

// withFast returns p with a fast-mode price.
func withFast(p Price, fast *Price) Price {
	p.Fast = fast
	return p
}

// family is one catalog model and the part of a model name that names it.
type family struct {
	key string // found anywhere in the lowercased model name
	id  string // the catalog's id
	// bare: key names a model without its minor version (claude-opus-4),
	// so it must not be followed by one ("-1" in claude-opus-4-1).
	bare  bool
	price Price
}

// families is in the order the CLI tries them: a longer name before the
// one it contains.
var families = []family{
	{key: "claude-fable-5-2", id: "claude-fable-5-2", price: withFast(tier8x40read020, fast16x80)},
	{key: "claude-fable-5-1", id: "claude-fable-5-1", price: tier10x50read25},
	{key: "claude-fable-5", id: "claude-fable-5", price: tier10x50},
	{key: "claude-mythos-5-2", id: "claude-mythos-5-2", price: withFast(tier8x40read020, fast16x80)},
	{key: "claude-mythos-5-1", id: "claude-mythos-5-1", price: tier10x50read25},
	{key: "claude-mythos-5", id: "claude-mythos-5", price: tier10x50},
	{key: "claude-opus-5-5", id: "claude-opus-5-5", price: withFast(tier4x20read020, fast8x40)},
	{key: "claude-opus-5", id: "claude-opus-5", price: withFast(tier5x25, fast10x50)},
	{key: "claude-opus-4-8", id: "claude-opus-4-8", price: withFast(tier5x25, fast10x50)},
	{key: "claude-opus-4-7", id: "claude-opus-4-7", price: withFast(tier5x25, fast30x150)},
	{key: "claude-opus-4-6", id: "claude-opus-4-6", price: withFast(tier5x25, fast30x150)},
	{key: "claude-opus-4-5", id: "claude-opus-4-5", price: tier5x25},
	{key: "claude-opus-4-1", id: "claude-opus-4-1", price: tier15x75},
	{key: "claude-opus-4-0", id: "claude-opus-4-0", price: tier15x75},
	{key: "claude-opus-4", id: "claude-opus-4-0", bare: true, price: tier15x75},
	{key: "claude-sonnet-5-5", id: "claude-sonnet-5-5", price: tier2x10read010},
	{key: "claude-sonnet-5", id: "claude-sonnet-5", price: tier2x10},
	{key: "claude-sonnet-4-6", id: "claude-sonnet-4-6", price: tier3x15},
	{key: "claude-sonnet-4-5", id: "claude-sonnet-4-5", price: tier3x15},
	{key: "claude-sonnet-4-0", id: "claude-sonnet-4-0", price: tier3x15},
	{key: "claude-sonnet-4", id: "claude-sonnet-4-0", bare: true, price: tier3x15},
	{key: "claude-haiku-5-5", id: "claude-haiku-5-5", price: haiku55},
	{key: "claude-haiku-4-5", id: "claude-haiku-4-5", price: haiku45},
	{key: "claude-3-7-sonnet", id: "claude-3-7-sonnet", price: tier3x15},
	{key: "claude-3-5-sonnet", id: "claude-3-5-sonnet", price: tier3x15},
	{key: "claude-3-5-haiku", id: "claude-3-5-haiku", price: haiku35},
}

// unknownPrice is what the CLI charges for a model it does not know
// (claude-3-opus, a gateway's own name, ...): the price of its default
// model, claude-opus-5-5, without fast mode. Observed: `--model
// some-unknown-model` reports costBasis "unknown" at these prices.
var unknownPrice = tier4x20read020

// Canonical is the catalog id of a model name as the CLI finds it (dates,
// provider prefixes and suffixes, a "[1m]" context suffix and case do not
// matter), or "" when the CLI does not know the model.
func Canonical(model string) string {
	m := strings.ToLower(strings.TrimSpace(model))
	m = strings.TrimSuffix(strings.TrimSuffix(m, "[1m]"), "[2m]")
	for _, f := range families {
		if contains(m, f.key, f.bare) {
			return f.id
		}
	}
	return ""
}

// contains reports whether key occurs in m as a whole version: not followed
// by another digit, and for a bare key not by a minor version ("-1" but
// not "-20250514").
func contains(m, key string, bare bool) bool {
	for from := 0; ; {
		i := strings.Index(m[from:], key)
		if i < 0 {
			return false
		}
		rest := m[from+i+len(key):]
		from += i + 1
		if rest != "" && isDigit(rest[0]) {
			continue
		}
		if bare && len(rest) >= 2 && rest[0] == '-' && isDigit(rest[1]) && (len(rest) == 2 || !isDigit(rest[2])) {
			continue
		}
		return true
	}
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// prices finds a model's price: an override by the exact (lowercased) name
// or by its catalog id, then the catalog; known is false for a model the
// CLI does not know, which costs unknownPrice.
func prices(overrides map[string]Price, model string) (p Price, known bool) {
	if p, ok := overrides[strings.ToLower(model)]; ok {
		return p, true
	}
	id := Canonical(model)
	if p, ok := overrides[id]; ok && id != "" {
		return p, true
	}
	for _, f := range families {
		if f.id == id {
			return f.price, true
		}
	}
	return unknownPrice, false
}

// Cost is what u costs at p, in USD, computed in the CLI's order of
// operations, so the two figures agree to the last bit.
func (p Price) Cost(u Usage) float64 {
	if u.Speed == "fast" && p.Fast != nil {
		p = *p.Fast
	}
	web := float64(u.WebSearchRequests) * p.WebSearch
	if p.LongPrompt != nil && u.InputTokens+u.CacheReadInputTokens+u.CacheCreationInputTokens > p.LongPromptAbove {
		p = *p.LongPrompt
	}
	write := float64(u.CacheCreationInputTokens) / 1e6 * p.CacheWrite
	if oneHour := min(max(u.CacheCreation1hInputTokens, 0), u.CacheCreationInputTokens); oneHour > 0 {
		write = float64(oneHour)/1e6*p.CacheWrite1h + float64(u.CacheCreationInputTokens-oneHour)/1e6*p.CacheWrite
	}
	tokens := float64(u.InputTokens)/1e6*p.Input +
		float64(u.OutputTokens)/1e6*p.Output +
		float64(u.CacheReadInputTokens)/1e6*p.CacheRead +
		write
	if u.InferenceGeo == "us" {
		tokens *= usGeoFactor
	}
	return tokens + web
}
