package relay

import (
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/majorhq/major/clientevent"
)

// What a person does with their chats as a list: give one a title of
// their own, pin it on top, find chats by their words.

// MaxTitle bounds a chat's title, in characters.
const MaxTitle = 200

// titleEvent tells a session's clients its new title (events stream
// only: it belongs to no turn).
type titleEvent struct {
	Type  string `json:"type"`
	Title string `json:"title"`
}

func (e titleEvent) EventType() string { return e.Type }

// SetTitle gives the chat a title of the person's: one line, not empty,
// at most MaxTitle characters (ErrBadSetting otherwise). The chat keeps it
// from then on; its first message no longer names it. Attached clients
// see a title event.
func (c *Session) SetTitle(title string) error {
	title = strings.Join(strings.Fields(title), " ")
	if title == "" {
		return badSetting("title must not be empty")
	}
	if n := utf8.RuneCountInString(title); n > MaxTitle {
		return badSetting("title is %d characters long; at most %d", n, MaxTitle)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.title = title
	c.stream.publishJSON(titleEvent{Type: "title", Title: c.titleLocked()}, false, false)
	c.persistLocked()
	return nil
}

// SetPinned pins the chat on top of the person's list, or unpins it.
func (c *Session) SetPinned(pinned bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pinned = pinned
	c.persistLocked()
}

// sortChats orders a list of chats: pinned ones first, then the most
// recently active.
func sortChats(list []SessionInfo) {
	sort.SliceStable(list, func(i, j int) bool {
		if list[i].Pinned != list[j].Pinned {
			return list[i].Pinned
		}
		return list[i].LastActivity.After(list[j].LastActivity)
	})
}

// MaxQuery bounds a search's words, in bytes.
const MaxQuery = 500

// Search lists the person's chats whose title or messages hold every word
// of query (case does not matter), the most recently active first, each
// with Match: the start of the first message that holds the first word
// (or the title). An empty query matches nothing.
func (r *Registry) Search(person, query string) []SessionInfo {
	if len(query) > MaxQuery {
		query = query[:MaxQuery]
	}
	words := strings.Fields(strings.ToLower(query))
	out := []SessionInfo{}
	if len(words) == 0 {
		return out
	}
	for _, c := range r.sessionsOf(person) {
		info := c.Info()
		texts := []string{info.Title}
		for _, m := range c.History() {
			texts = append(texts, m.Content)
		}
		if match, ok := matchAll(texts, words); ok {
			info.Match = match
			out = append(out, info)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].LastActivity.After(out[j].LastActivity) })
	return out
}

// matchLen bounds a search result's Match, in bytes.
const matchLen = 160

// matchAll reports whether every word is in one of texts, and returns
// the text around the first word's first place.
func matchAll(texts, words []string) (string, bool) {
	lower := make([]string, len(texts))
	for i, t := range texts {
		lower[i] = strings.ToLower(t)
	}
	for _, w := range words {
		found := false
		for _, t := range lower {
			if strings.Contains(t, w) {
				found = true
				break
			}
		}
		if !found {
			return "", false
		}
	}
	for i, t := range lower {
		at := strings.Index(t, words[0])
		if at < 0 {
			continue
		}
		// The text around it; lowercasing may change byte lengths, so
		// the cut is made in the lowercase text when they differ.
		text := texts[i]
		if len(text) != len(t) {
			text = t
		}
		start := max(0, at-matchLen/4)
		for start > 0 && !utf8.RuneStart(text[start]) {
			start--
		}
		snippet := clientevent.OneLine(text[start:], matchLen)
		if start > 0 {
			snippet = "…" + snippet
		}
		return snippet, true
	}
	return "", true
}
