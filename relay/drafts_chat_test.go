package relay_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The person's confirmation counts from the moment their message goes to
// the CLI, even while the session's events still wait behind the previous
// turn's end: the model's call in that turn runs, and is not held back as
// a new draft that the same message would then approve.
func TestDraftConfirmedWhileTurnEndRuns(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var calls atomic.Int32
	h := newFakeHarness(t, harnessOpts{askTools: []string{"Write"}, confirmTools: []string{"Write"},
		turnEnd: func(ctx context.Context, person, id string) string {
			if calls.Add(1) == 1 {
				<-release
			}
			return ""
		}})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	id := h.NewSession(t)
	input := `{"file_path":"/vault/post.md","content":"hello"}`
	// No client can answer: the call is held back as a draft, and the
	// turn ends.
	if code, _ := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "[[tool Write " + input + "]]"}); code != http.StatusAccepted {
		t.Fatalf("first message: %d", code)
	}
	// The draft's turn is over for the CLI while its end hook still runs;
	// the person confirms now, after the draft was made.
	for deadline := time.Now().Add(30 * time.Second); calls.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first turn did not end")
		}
	}
	// Its answer waits for the turn to start on the stream, which the
	// held end lets through only once the hook returns.
	answered := make(chan int, 1)
	go func() {
		code, _ := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": "yes"})
		answered <- code
	}()
	defer func() {
		free()
		if code := <-answered; code != http.StatusAccepted {
			t.Errorf("confirmation: %d", code)
		}
	}()
	cli := h.fake(t, id)
	for deadline := time.Now().Add(30 * time.Second); len(cli.Sent()) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the confirmation did not go to the CLI")
		}
	}
	// The model calls Write again, unchanged, in the confirmation's turn.
	res, err := cli.UseTool(context.Background(), "Write", json.RawMessage(input))
	if err != nil || !res.Allow {
		t.Fatalf("the confirmed call: %+v %v", res, err)
	}
	if !cli.Reply("published") {
		t.Fatal("the confirmation's turn was not running")
	}
}
