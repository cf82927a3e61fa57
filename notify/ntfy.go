package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Content settings for channels whose messages pass through a third
// party (ntfy unless self-hosted, FCM).
const (
	// ContentSummary sends no text of the chat: only that Major needs an
	// answer (or answered) in the chat, by its title; the actions stay.
	ContentSummary = "summary"
	// ContentFull sends what Web Push sends.
	ContentFull = "full"
)

// ntfyLimit is the most of a message ntfy takes in one publish.
const ntfyLimit = 4096

// ntfy publishes to an ntfy topic with ntfy's JSON publishing: a POST of
// {topic, title, message, actions} to the server's root URL, with the
// device's access token as a bearer token. Its action buttons are http
// actions: the ntfy app POSTs to the action URL when one is tapped.
type ntfy struct {
	client  *http.Client
	content string
	// click, when set, is the URL a tap on the message opens, with the
	// chat's id appended.
	click string
}

// ntfyTarget splits a topic's URL into the server's root, which JSON
// publishing posts to, and the topic.
func ntfyTarget(topicURL string) (root, topic string) {
	i := strings.LastIndexByte(topicURL, '/')
	if i < 0 {
		return "", ""
	}
	return topicURL[:i+1], topicURL[i+1:]
}

type ntfyAction struct {
	Action string `json:"action"`
	Label  string `json:"label"`
	URL    string `json:"url"`
	Method string `json:"method"`
	Clear  bool   `json:"clear"`
}

type ntfyMessage struct {
	Topic    string       `json:"topic"`
	Title    string       `json:"title"`
	Message  string       `json:"message"`
	Priority int          `json:"priority,omitempty"`
	Tags     []string     `json:"tags,omitempty"`
	Click    string       `json:"click,omitempty"`
	Actions  []ntfyAction `json:"actions,omitempty"`
}

func (n *ntfy) send(ctx context.Context, d Device, p Payload) error {
	if n.content != ContentFull {
		p = p.Summarized()
	}
	p.fit(ntfyLimit)
	root, topic := ntfyTarget(d.URL)
	m := ntfyMessage{Topic: topic, Title: p.Title, Message: p.Body, Priority: 3}
	if waits(p.Type) {
		m.Priority, m.Tags = 4, []string{"question"}
	}
	if n.click != "" && p.SessionID != "" {
		m.Click = n.click + p.SessionID
	}
	for i, a := range p.Actions {
		if i == maxOptions || strings.HasPrefix(a.URL, "/") {
			break // ntfy shows three; a relative URL is the web's only
		}
		m.Actions = append(m.Actions, ntfyAction{Action: "http", Label: a.Label, URL: a.URL, Method: http.MethodPost, Clear: true})
	}
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, root, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("ntfy: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if d.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.Token)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return fmt.Errorf("ntfy: %w", err)
	}
	if text := drain(resp); resp.StatusCode/100 != 2 {
		return fmt.Errorf("ntfy: %w", &statusError{resp.StatusCode, text})
	}
	return nil
}
