package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/majorhq/major/attachments"
)

// A title of the person's is one line of at most MaxTitle characters; a
// bad one is refused and leaves the old title. It outlives a restart, and
// the chat's first message no longer names the chat.
func TestSetTitle(t *testing.T) {
	st := newStore(t)
	s := storedRegistry(t, st, RegistryConfig{})
	chat, _ := s.GetOrCreate("", "sebastian")
	long := strings.Repeat("é", MaxTitle)
	tests := []struct {
		name, title, want string
		bad               bool
	}{
		{name: "plain", title: "Trip to Lisbon", want: "Trip to Lisbon"},
		{name: "spaces and lines collapse", title: "  Trip\n to\tPorto ", want: "Trip to Porto"},
		{name: "at most MaxTitle characters, not bytes", title: long, want: long},
		{name: "empty", title: "", bad: true},
		{name: "spaces only", title: " \n\t ", bad: true},
		{name: "too long", title: long + "x", bad: true},
	}
	last := ""
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := chat.SetTitle(tc.title)
			if tc.bad {
				if !errors.Is(err, ErrBadSetting) {
					t.Fatalf("SetTitle(%q) = %v, want ErrBadSetting", tc.title, err)
				}
				if got := chat.Info().Title; got != last {
					t.Fatalf("title after a refused one: %q, want %q", got, last)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := chat.Info().Title; got != tc.want {
				t.Fatalf("title %q, want %q", got, tc.want)
			}
			last = tc.want
		})
	}
	if err := chat.SetTitle("Trip to Lisbon"); err != nil {
		t.Fatal(err)
	}
	publishAll(chat, answerTurn(t, "what should I pack", "a coat", "."))
	if got := chat.Info().Title; got != "Trip to Lisbon" {
		t.Fatalf("after the first message: %q", got)
	}
	s.Close()
	again, err := storedRegistry(t, st, RegistryConfig{}).Get(chat.ID, "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Info().Title; got != "Trip to Lisbon" {
		t.Fatalf("after a restart: %q", got)
	}
}

// Pinned chats come first in the list, then the most recently active;
// a pin outlives a restart, and unpinning puts the chat back in its place.
func TestPinnedChatsComeFirst(t *testing.T) {
	st := newStore(t)
	s := storedRegistry(t, st, RegistryConfig{})
	var ids []string
	start := time.Now()
	for i := range 3 {
		c, _ := s.GetOrCreate("", "sebastian")
		c.mu.Lock()
		c.lastActivity = start.Add(time.Duration(i) * time.Minute)
		c.mu.Unlock()
		ids = append(ids, c.ID)
	}
	order := func(s *Registry) string {
		var got []string
		for _, info := range s.List("sebastian") {
			got = append(got, info.ID)
		}
		return strings.Join(got, " ")
	}
	oldest, _ := s.Get(ids[0], "sebastian")
	oldest.SetPinned(true)
	if got, want := order(s), strings.Join([]string{ids[0], ids[2], ids[1]}, " "); got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
	if !s.List("sebastian")[0].Pinned {
		t.Fatal("the list does not say the chat is pinned")
	}
	s.Close()
	s2 := storedRegistry(t, st, RegistryConfig{})
	if got, want := order(s2), strings.Join([]string{ids[0], ids[2], ids[1]}, " "); got != want {
		t.Fatalf("order after a restart %s, want %s", got, want)
	}
	again, _ := s2.Get(ids[0], "sebastian")
	again.SetPinned(false)
	if got, want := order(s2), strings.Join([]string{ids[2], ids[1], ids[0]}, " "); got != want {
		t.Fatalf("order after unpinning %s, want %s", got, want)
	}
}

// Search finds the person's chats by their title and their messages'
// words, every word somewhere in the chat, the most recently active
// first, never another person's.
func TestSearchChats(t *testing.T) {
	s := storedRegistry(t, newStore(t), RegistryConfig{})
	start := time.Now()
	chat := func(person, title, message, answer string, minutes int) string {
		c, _ := s.GetOrCreate("", person)
		publishAll(c, answerTurn(t, message, answer, "."))
		if title != "" {
			if err := c.SetTitle(title); err != nil {
				t.Fatal(err)
			}
		}
		c.mu.Lock()
		c.lastActivity = start.Add(time.Duration(minutes) * time.Minute)
		c.mu.Unlock()
		return c.ID
	}
	lisbon := chat("sebastian", "Trip to Lisbon", "what should I pack", "a warm Coat and boots", 1)
	recipes := chat("sebastian", "", "a recipe for soup", "leeks, a coat of butter", 2)
	other := chat("petra", "Lisbon notes", "pack list", "coat", 3)
	tests := []struct {
		query string
		want  []string
		match string
	}{
		{query: "lisbon", want: []string{lisbon}, match: "Trip to Lisbon"},
		{query: "COAT", want: []string{recipes, lisbon}, match: "leeks, a coat of butter"},
		{query: "boots lisbon", want: []string{lisbon}, match: "a warm coat and boots"},
		{query: "soup", want: []string{recipes}, match: "a recipe for soup"},
		{query: "pack boots leeks", want: nil},
		{query: "nothing like it", want: nil},
		{query: "   ", want: nil},
		{query: "", want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			got := s.Search("sebastian", tc.query)
			if got == nil {
				t.Fatal("nil list (clients read null)")
			}
			var ids []string
			for _, info := range got {
				if info.ID == other {
					t.Fatal("another person's chat found")
				}
				ids = append(ids, info.ID)
			}
			if strings.Join(ids, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("found %v, want %v", ids, tc.want)
			}
			if len(got) > 0 && !strings.Contains(strings.ToLower(got[0].Match), strings.ToLower(tc.match)) {
				t.Fatalf("match %q, want it to hold %q", got[0].Match, tc.match)
			}
		})
	}
}

// What was said in a terminal shows in both histories once the terminal
// closed, after a restart too, and the next message follows its last
// entry.
func TestTerminalTurnsShowInBothHistories(t *testing.T) {
	st := newStore(t)
	s := storedRegistry(t, st, RegistryConfig{})
	chat, _ := s.GetOrCreate("", "sebastian")
	publishAll(chat, answerTurn(t, "in the app", "app answer", "."))
	chat.TerminalTurns([]attachments.HistoryEntry{{Role: "user", Content: "typed in the terminal"}, {Role: "assistant", Content: "answered there"}}, "entry-9")
	if got := chat.LastEntry(); got != "entry-9" {
		t.Fatalf("last entry %q", got)
	}
	check := func(c *Session) {
		t.Helper()
		var compat []string
		for _, m := range c.History() {
			compat = append(compat, m.Role+": "+m.Content)
		}
		if want := "user: in the app|assistant: app answer.|user: typed in the terminal|assistant: answered there"; strings.Join(compat, "|") != want {
			t.Fatalf("history %q", compat)
		}
		rich := c.Messages()
		if len(rich) != 4 || !rich[2].Terminal || !rich[3].Terminal || rich[0].Terminal || rich[3].Content != "answered there" {
			t.Fatalf("rich history %+v", rich)
		}
	}
	check(chat)
	s.Close()
	again, err := storedRegistry(t, st, RegistryConfig{}).Get(chat.ID, "sebastian")
	if err != nil {
		t.Fatal(err)
	}
	check(again)
}
