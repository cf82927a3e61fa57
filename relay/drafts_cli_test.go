package relay_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/scriptedmodel"
)

// The person's confirmation counts from the moment their message goes to
// the CLI, even while the session's events still wait behind the previous
// turn's end: the model's call in that turn runs, and is not held back as
// a new draft that the same message would then approve.
func TestDraftConfirmedWhileTurnEndRuns(t *testing.T) {
	t.Parallel()
	// A model that calls Write again, unchanged, on any plain message.
	env := clitest.New(t, func(req scriptedmodel.Request) scriptedmodel.Reply {
		text := req.LastUserText()
		if len(req.ToolResults()) > 0 && text == "" || strings.Contains(text, "[[") {
			return scriptedmodel.Script(req)
		}
		for i := len(req.Messages) - 1; i >= 0; i-- {
			for _, b := range req.Messages[i].Content {
				if b.Type == "tool_use" && b.Name == "Write" {
					return scriptedmodel.ToolUse(b.Name, b.Input)
				}
			}
		}
		return scriptedmodel.Script(req)
	})
	release := make(chan struct{})
	var calls atomic.Int32
	h := newHarness(t, harnessOpts{env: env, askTools: []string{"Write"}, confirmTools: []string{"Write"},
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
	note := filepath.Join(env.Vault("sebastian"), "post.md")
	write := `[[tool Write {"file_path":"` + note + `","content":"hello"}]]`
	if code, _ := h.Call(t, "POST", "/api/claude/sessions/"+id+"/messages", "sebastian", map[string]any{"message": write}); code != http.StatusAccepted {
		t.Fatalf("first message: %d", code)
	}
	// The draft's turn is over for the CLI while its end hook still runs;
	// the person confirms now, after the draft was made.
	for deadline := time.Now().Add(60 * time.Second); calls.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first turn did not end")
		}
		time.Sleep(20 * time.Millisecond)
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
	for deadline := time.Now().Add(30 * time.Second); ; {
		if b, err := os.ReadFile(note); err == nil && string(b) == "hello" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the confirmed call did not run")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
