package supervisor_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/clitest"
	"github.com/majorhq/major/scriptedmodel"
)

// TestContentBlocksReachTheModel: a user message with an image, a
// document and a text block before its text goes through the real CLI's
// stream-json input to the model as those blocks, data unchanged, in
// order, with the person's text last; the turn starts with the text only.
func TestContentBlocksReachTheModel(t *testing.T) {
	t.Parallel()
	env := clitest.New(t, nil)
	rec := clitest.NewRecorder()
	s := newSession(t, env, rec, nil)

	// A 1×1 PNG and a minimal PDF.
	png, _ := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC")
	pdf := []byte("%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n")
	block := func(v map[string]any) json.RawMessage {
		b, _ := json.Marshal(v)
		return b
	}
	blocks := []json.RawMessage{
		block(map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": base64.StdEncoding.EncodeToString(png)}}),
		block(map[string]any{"type": "document", "title": "scan.pdf", "source": map[string]any{"type": "base64", "media_type": "application/pdf", "data": base64.StdEncoding.EncodeToString(pdf)}}),
		block(map[string]any{"type": "text", "text": "[Attached note a.md]\nmilk\n[end of note a.md]"}),
	}
	if err := s.SendContent(context.Background(), "put this in my notes [[blocks]]", blocks); err != nil {
		t.Fatal(err)
	}
	if ev := rec.WaitEnd(t, 90*time.Second); ev.Err != nil {
		t.Fatal(ev.Err)
	}
	want := fmt.Sprintf("BLOCKS: image image/png %d | document application/pdf %d \"scan.pdf\" | text [Attached note a.md] milk [end of note a.md] | text put this in my notes [[blocks]]",
		len(png), len(pdf))
	if got := strings.TrimSpace(rec.Text()); got != want {
		t.Fatalf("the model saw\n %s\nwant\n %s", got, want)
	}
	reqs := env.Model.Requests()
	last := reqs[len(reqs)-1].LastUser().Content
	var image *scriptedmodel.Block
	for i := range last {
		if last[i].Type == "image" {
			image = &last[i]
		}
	}
	if image == nil || image.Source.Data != base64.StdEncoding.EncodeToString(png) {
		t.Fatalf("the image's data changed on the way: %+v", image)
	}
	if start := rec.Events()[0]; start.Text != "put this in my notes [[blocks]]" {
		t.Fatalf("the turn started with %q", start.Text)
	}
}
