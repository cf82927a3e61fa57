package relay_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/majorhq/major/httpapi/httpapitest"
)

// withoutCredentials drops every variable that gives the CLI an Anthropic
// credential.
func withoutCredentials(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN":
			continue
		}
		out = append(out, kv)
	}
	return out
}

func num(m map[string]json.RawMessage, key string) int {
	var n float64
	_ = json.Unmarshal(m[key], &n)
	return int(n)
}

// Each way a model call fails ends the turn with its own sentence, after a
// status line for every retry the CLI makes; compat lines keep the seed's
// key sets, the events stream carries the kind, the HTTP status and the
// retry-after, and nothing the CLI wrote for itself (its "API Error: ..."
// text naming the gateway) reaches the person. A failed turn leaves the
// CLI able to take the next one, so the failures the model sends run as
// consecutive turns of one session; a CLI without a key runs on its own.
func TestModelFailuresNamedPlainly(t *testing.T) {
	t.Parallel()
	type failureCase struct {
		name    string
		message string
		rejectK bool // the model accepts only another key from now on
		retries string
		want    string
		kind    string
		status  int
	}
	run := func(t *testing.T, h *harness, id string, a <-chan map[string]json.RawMessage, tc failureCase) {
		if tc.rejectK {
			h.env.Model.RequireKey("another-key")
		}
		_, evs := h.ChatStream(t, "sebastian", "application/x-www-form-urlencoded",
			"message="+strings.ReplaceAll(tc.message, " ", "+")+"&session_id="+id)
		httpapitest.CheckCompat(t, evs)
		retries := 0
		for _, ev := range evs {
			if httpapitest.Str(ev, "type") == "status" && tc.retries != "" && strings.HasPrefix(httpapitest.Str(ev, "message"), tc.retries) {
				retries++
			}
			line, _ := json.Marshal(ev)
			if strings.Contains(string(line), "API Error") || strings.Contains(string(line), "127.0.0.1") ||
				strings.Contains(string(line), "/login") {
				t.Fatalf("the person sees the CLI's own text: %s", line)
			}
		}
		if tc.retries != "" && retries != 2 {
			t.Fatalf("%d retry statuses, want 2: %v", retries, evs)
		}
		last := evs[len(evs)-1]
		if httpapitest.Str(last, "type") != "error" || !strings.Contains(httpapitest.Str(last, "message"), tc.want) {
			t.Fatalf("turn ended with %v, want an error saying %q", last, tc.want)
		}

		rich := httpapitest.Until(t, a, "error")
		e := rich[len(rich)-1]
		if httpapitest.Str(e, "kind") != tc.kind || num(e, "status") != tc.status || httpapitest.Str(e, "outcome") != "error" ||
			httpapitest.Str(e, "message") != httpapitest.Str(last, "message") {
			t.Fatalf("events stream error %v, want kind %s status %d", e, tc.kind, tc.status)
		}
		if tc.kind == "rate_limited" && num(e, "retry_after") < 1 {
			t.Fatalf("rate limit without retry_after: %v", e)
		}
		seen := 0
		for _, ev := range rich {
			if httpapitest.Str(ev, "type") == "status" && httpapitest.Str(ev, "kind") == tc.kind && num(ev, "attempt") > 0 {
				seen++
			}
		}
		if tc.retries != "" && seen != 2 {
			t.Fatalf("events stream has %d retry statuses with a kind, want 2: %v", seen, rich)
		}
	}
	start := func(t *testing.T, o harnessOpts) (*harness, string, <-chan map[string]json.RawMessage) {
		o.cliEnv = append(o.cliEnv, "CLAUDE_CODE_MAX_RETRIES=2")
		h := newHarness(t, o)
		id := h.NewSession(t)
		a, closeA := h.Attach(t, id, "types=status,text,error,done")
		t.Cleanup(closeA)
		return h, id, a
	}

	t.Run("no key", func(t *testing.T) {
		t.Parallel()
		h, id, a := start(t, harnessOpts{noKey: true})
		run(t, h, id, a, failureCase{message: "hello", want: "the API key is missing or invalid", kind: "auth"})
	})
	t.Run("model failures", func(t *testing.T) {
		t.Parallel()
		h, id, a := start(t, harnessOpts{})
		for _, tc := range []failureCase{
			{name: "overloaded", message: "[[status 529]]", retries: "The model is overloaded, retrying in ",
				want: "The model is overloaded right now", kind: "overloaded", status: 529},
			{name: "rate limited", message: "[[status 429 1]]", retries: "The model's rate limit was reached, retrying in ",
				want: "The model is rate limited until about ", kind: "rate_limited", status: 429},
			{name: "unauthorized", message: "[[status 401]]",
				want: "the API key is missing or invalid", kind: "auth", status: 401},
			{name: "connection dropped", message: "[[drop]]", retries: "The connection to the model failed, retrying in ",
				want: "The model could not be reached", kind: "network"},
			// Last: the model refuses the CLI's key from here on.
			{name: "key rejected", message: "hello", rejectK: true,
				want: "the API key is missing or invalid", kind: "auth", status: 401},
		} {
			t.Run(tc.name, func(t *testing.T) { run(t, h, id, a, tc) })
		}
	})
}
