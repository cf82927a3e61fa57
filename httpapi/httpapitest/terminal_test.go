package httpapitest

import "testing"

// A screen the CLI drew with cursor moves between words (seen in CI) reads
// as the words with single spaces.
func TestScreenTextReadsCursorMovesAsSpaces(t *testing.T) {
	screen := "\x1b]0;✳ Claude Code\a\x1b[?1049h\x1b[2J\x1b[H\r\x1b[1B●\x1b[3Gthe\x1b[7Gapp's\x1b[13Gfirst\x1b[19Ganswer\r\n" +
		"❯\u00a0\x1b[7m \r\x1b[1B\x1b[27m───\r\x1b[2C\x1b[1B⏵⏵\x1b[6Gaccept\x1b[13Gedits\x1b[19Gon\x1b[30;1H\x1bP+q\x1b\\\x1b7x"
	want := "● the app's first answer ❯ ─── ⏵⏵ accept edits on x"
	if got := ScreenText(screen); got != want {
		t.Fatalf("ScreenText:\n got %q\nwant %q", got, want)
	}
}
