package clientevent

import "testing"

// A model's name is what a person reads, whatever the CLI reports.
func TestModelName(t *testing.T) {
	tests := map[string]string{
		"":                           "",
		"sonnet":                     "Sonnet",
		"opus[1m]":                   "Opus (1M context)",
		"claude-sonnet-4-5-20250929": "Sonnet 4.5",
		"claude-opus-4-1":            "Opus 4.1",
		"claude-haiku-4-5":           "Haiku 4.5",
		"claude-sonnet-4-20250514":   "Sonnet 4",
		"claude-3-5-haiku-20241022":  "Haiku 3.5",
		"claude-3-7-sonnet-latest":   "Sonnet 3.7",
		"claude-sonnet-4-5[1m]":      "Sonnet 4.5 (1M context)",
		"opusplan":                   "Opus (plans), Sonnet (the rest)",
		"some-other-model":           "some-other-model",
	}
	for id, want := range tests {
		t.Run(id, func(t *testing.T) {
			if got := ModelName(id); got != want {
				t.Fatalf("ModelName(%q) = %q, want %q", id, got, want)
			}
		})
	}
}
