package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/majorhq/major/attachments"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/relay/relaytest"
	"github.com/majorhq/major/vault"
)

// waitStarted waits until t's turn has started.
func waitStarted(tb testing.TB, t *relay.Ticket) {
	tb.Helper()
	select {
	case <-t.Started():
		if err := t.Err(); err != nil {
			tb.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		tb.Fatal("the turn did not start")
	}
}

// eventOf is the first event of type typ in the session's log, decoded.
func eventOf(tb testing.TB, chat *relay.Session, typ string, v any) bool {
	tb.Helper()
	for _, ev := range chat.Stream().Events(0) {
		if ev.Type == typ {
			if err := json.Unmarshal(ev.Line, v); err != nil {
				tb.Fatal(err)
			}
			return true
		}
	}
	return false
}

// TestAttachedGoesWithTheMessage: the blocks a message carries reach the
// CLI with its text, the turn's start and both histories name its files
// and notes, and a resend joins the message only if it carries the same
// content.
func TestAttachedGoesWithTheMessage(t *testing.T) {
	t.Parallel()
	sessions, fakes := relaytest.NewRegistry(t, relay.RegistryConfig{})
	chat, _ := sessions.GetOrCreate("", "sebastian")
	file := attachments.File{ID: "att_1", Name: "receipt.pdf", Path: "attachments/2026-05/receipt.pdf", MediaType: "application/pdf", Size: 9}
	block := json.RawMessage(`{"type":"text","text":"[Attached file]"}`)
	att := relay.Attached{Files: []attachments.File{file}, Notes: []string{"plans/trip.md"},
		Content: attachments.Content{Blocks: []json.RawMessage{block}, Digest: "d1"}}
	tk, err := sessions.Submit(chat, "file this", relay.SubmitOptions{Stream: true, Attached: att})
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, tk)
	fake := fakes.CLI(chat.ID)
	if b := fake.Blocks(); len(b) != 1 || len(b[0]) != 1 || string(b[0][0]) != string(block) {
		t.Fatalf("blocks sent %s", b)
	}
	// Same text, other content: a new message, queued; same content: the
	// same message.
	other, _ := sessions.Submit(chat, "file this", relay.SubmitOptions{Stream: true, Attached: relay.Attached{Content: attachments.Content{Digest: "d2"}}})
	same, _ := sessions.Submit(chat, "file this", relay.SubmitOptions{Stream: true, Attached: att})
	if other == tk || same != tk || !other.Queued() {
		t.Fatal("a resend is told by its text alone")
	}
	var start struct {
		Attachments []attachments.File `json:"attachments"`
		Notes       []string           `json:"notes"`
	}
	if !eventOf(t, chat, "turn_start", &start) || len(start.Attachments) != 1 || start.Attachments[0].Path != file.Path ||
		start.Notes[0] != "plans/trip.md" {
		t.Fatalf("turn_start %+v", start)
	}
	fake.Reply("filed")
	if h := chat.History(); h[0].Content != "file this\n[attached: receipt.pdf]" {
		t.Fatalf("compat history %q", h[0].Content)
	}
	if m := chat.Messages(); len(m[0].Attachments) != 1 || m[0].Notes[0] != "plans/trip.md" {
		t.Fatalf("rich history %+v", m[0])
	}
}

// TestImportedHistory: a session made with an imported conversation shows
// it first in both histories and gives it to the model with its first
// message only.
func TestImportedHistory(t *testing.T) {
	t.Parallel()
	sessions, fakes := relaytest.NewRegistry(t, relay.RegistryConfig{})
	chat, err := sessions.CreateWithHistory("sebastian", []attachments.HistoryEntry{{Role: "user", Content: "My cat is Tiger."}, {Role: "assistant", Content: "Nice."}})
	if err != nil {
		t.Fatal(err)
	}
	fake := fakes.CLI(chat.ID)
	var conversation string
	fake.CLISessionIDFunc = func() string { return conversation }
	for i, text := range []string{"first", "second"} {
		tk, err := sessions.Submit(chat, text, relay.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitStarted(t, tk)
		fake.Reply("ok")
		conversation = "cli-conversation" // the CLI has it now
		if n := len(fake.Blocks()); n != 1 {
			t.Fatalf("after message %d, %d messages went with blocks", i+1, n)
		}
	}
	if b := string(fake.Blocks()[0][0]); !strings.Contains(b, "Person: My cat is Tiger.") || !strings.Contains(b, "Assistant: Nice.") {
		t.Fatalf("the first message's blocks %s", b)
	}
	h := chat.History()
	if len(h) != 6 || h[0].Content != "My cat is Tiger." || h[2].Content != "first" {
		t.Fatalf("compat history %v", h)
	}
	if m := chat.Messages(); !m[0].Imported || m[0].ID != "imported-1" || m[1].Role != "assistant" || m[1].Content != "Nice." || m[2].ID != "turn-1-user" {
		t.Fatalf("rich history %+v", m)
	}
}

// fakeCommits is a relay.Commits with a head set by the test.
type fakeCommits struct {
	mu   sync.Mutex
	head string
}

func (f *fakeCommits) SessionHead(context.Context, string, time.Time) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.head, nil
}

func (f *fakeCommits) CommitFiles(_ context.Context, _, commit string) ([]vault.FileChange, error) {
	return []vault.FileChange{{Path: "notes/" + commit + ".md", Status: "added", Insertions: 1}}, nil
}

func (f *fakeCommits) CommitDiff(_ context.Context, _, commit string) (string, error) {
	return "+++ b/notes/" + commit + ".md\n", nil
}

// TestChangesPerTurn: a turn whose end made a new commit of the session
// gets a changes event before its done; a turn that made none gets none;
// the diff is read per turn.
func TestChangesPerTurn(t *testing.T) {
	t.Parallel()
	commits := &fakeCommits{}
	sessions, fakes := relaytest.NewRegistry(t, relay.RegistryConfig{Commits: commits,
		TurnEnd: func(context.Context, string, string) string { return "" }})
	chat, _ := sessions.GetOrCreate("", "sebastian")
	for _, head := range []string{"c1", "c1", "c3"} {
		commits.mu.Lock()
		commits.head = head
		commits.mu.Unlock()
		tk, err := sessions.Submit(chat, "write "+head, relay.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitStarted(t, tk)
		fakes.CLI(chat.ID).Reply("done")
		deadline := time.Now().Add(10 * time.Second)
		for chat.Stream().TurnOpen() {
			if time.Now().After(deadline) {
				t.Fatal("the turn did not end")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	ch := chat.Changes()
	if len(ch) != 2 || ch[0].Turn != 1 || ch[0].Commit != "c1" || ch[1].Turn != 3 || ch[1].MessageID != "turn-3-user" ||
		ch[1].Files[0].Path != "notes/c3.md" {
		t.Fatalf("changes %+v", ch)
	}
	// The changes come before the turn's done.
	var types []string
	for _, ev := range chat.Stream().Events(0) {
		if ev.Turn == 3 && ev.Type != "cli" {
			types = append(types, ev.Type)
		}
	}
	if got := strings.Join(types, ","); !strings.HasSuffix(got, "changes,done") {
		t.Fatalf("turn 3's events %s", got)
	}
	d, err := sessions.Diff(context.Background(), chat, 3)
	if err != nil || d.Diff != "+++ b/notes/c3.md\n" {
		t.Fatalf("diff %+v %v", d, err)
	}
	if _, err := sessions.Diff(context.Background(), chat, 2); !errors.Is(err, relay.ErrNoChanges) {
		t.Fatalf("a turn without changes: %v", err)
	}
}
