package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/majorhq/major/internal/procgroup"
)

type transcriptLine struct {
	Dir string          `json:"dir"`
	Msg json.RawMessage `json:"msg"`
}

// readTranscript loads the recorded two-way CLI session (a golden file).
func readTranscript(tb testing.TB) []transcriptLine {
	tb.Helper()
	f, err := os.Open(filepath.Join("testdata", "transcript-cli-2.1.330.ndjson"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []transcriptLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l transcriptLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			tb.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// script starts a stand-in child process running a shell script, to test
// the reader and the router against exact bytes. (The real CLI is tested
// in session_test.go.)
func script(tb testing.TB, sh string, h Handlers) (*Process, *collector) {
	tb.Helper()
	col := &collector{exited: make(chan error, 1)}
	p, err := StartProcess(ProcessConfig{
		Path: "/bin/sh", Args: []string{"-c", sh}, Dir: tb.TempDir(),
		Env: []string{"PATH=/usr/bin:/bin"}, Handlers: h,
		OnMessage: col.add, OnExit: func(err error) { col.exited <- err },
		Grace:  2 * time.Second,
		Logger: zerolog.New(zerolog.NewTestWriter(tb)),
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p, col
}

type collector struct {
	mu     sync.Mutex
	msgs   []*Message
	exited chan error
}

func (c *collector) add(m *Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, m)
}

func (c *collector) all() []*Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Message(nil), c.msgs...)
}

func (c *collector) wait(tb testing.TB) error {
	tb.Helper()
	select {
	case err := <-c.exited:
		return err
	case <-time.After(10 * time.Second):
		tb.Fatal("process did not exit")
		return nil
	}
}

func TestUnknownTypesPassThrough(t *testing.T) {
	_, col := script(t, `
echo '{"type":"brand_new_thing","nested":{"a":[1,2]},"extra":"kept"}'
echo 'not json at all'
echo '{"no_type":true}'
echo '{"type":"system","subtype":"never_seen_before","x":1}'
`, Handlers{})
	col.wait(t)
	msgs := col.all()
	if len(msgs) != 2 {
		t.Fatalf("got %d messages, want 2 (bad lines are skipped, not fatal)", len(msgs))
	}
	if msgs[0].Type != "brand_new_thing" || string(msgs[0].Raw) != `{"type":"brand_new_thing","nested":{"a":[1,2]},"extra":"kept"}` {
		t.Fatalf("unknown type changed: %s", msgs[0].Raw)
	}
	if msgs[1].Subtype != "never_seen_before" {
		t.Fatalf("unknown subtype: %+v", msgs[1])
	}
}

// answerOf reads the control_response the stand-in echoed back to stdout.
func answerOf(tb testing.TB, msgs []*Message, id string) map[string]any {
	tb.Helper()
	for _, m := range msgs {
		if m.Type != "echo" {
			continue
		}
		var e struct {
			Got struct {
				Type     string         `json:"type"`
				Response map[string]any `json:"response"`
			} `json:"got"`
		}
		if err := json.Unmarshal(m.Raw, &e); err != nil {
			tb.Fatal(err)
		}
		if e.Got.Response["request_id"] == id {
			return e.Got.Response
		}
	}
	tb.Fatalf("no answer to %s", id)
	return nil
}

// echoBack is shell that reads one line from stdin and writes it back
// wrapped as {"type":"echo","got":<line>}.
const echoBack = `read -r line; printf '{"type":"echo","got":%s}\n' "$line"
`

func TestControlRequestsAnsweredOnce(t *testing.T) {
	var hookCalls int
	var mu sync.Mutex
	h := Handlers{
		HookCallback: func(ctx context.Context, req *ControlRequest) (json.RawMessage, error) {
			mu.Lock()
			hookCalls++
			mu.Unlock()
			return nil, nil // empty means go on
		},
		CanUseTool: func(ctx context.Context, req *ControlRequest) (PermissionResult, error) {
			return PermissionResult{Message: "no " + req.ToolName}, nil
		},
	}
	_, col := script(t, `
echo '{"type":"control_request","request_id":"u1","request":{"subtype":"totally_unknown"}}'
`+echoBack+`
echo '{"type":"control_request","request_id":"h1","request":{"subtype":"hook_callback","callback_id":"x","input":{"tool_name":"Read"}}}'
`+echoBack+`
echo '{"type":"control_request","request_id":"c1","request":{"subtype":"can_use_tool","tool_name":"Write","input":{}}}'
`+echoBack+`
echo '{"type":"control_request","request_id":"m1","request":{"subtype":"mcp_message","server_name":"x","message":{}}}'
`+echoBack+`
echo '{"type":"control_request","request_id":"n1"}'
`+echoBack, h)
	col.wait(t)
	msgs := col.all()
	if a := answerOf(t, msgs, "u1"); a["subtype"] != "error" || !strings.Contains(a["error"].(string), "totally_unknown") {
		t.Fatalf("unknown subtype answered %v", a)
	}
	if a := answerOf(t, msgs, "h1"); a["subtype"] != "success" || a["response"].(map[string]any)["continue"] != true {
		t.Fatalf("hook answered %v", a)
	}
	if a := answerOf(t, msgs, "c1"); a["response"].(map[string]any)["behavior"] != "deny" || a["response"].(map[string]any)["message"] != "no Write" {
		t.Fatalf("can_use_tool answered %v", a)
	}
	if a := answerOf(t, msgs, "m1"); a["subtype"] != "error" {
		t.Fatalf("mcp_message with no handler answered %v", a)
	}
	if a := answerOf(t, msgs, "n1"); a["subtype"] != "error" {
		t.Fatalf("request without body answered %v", a)
	}
	if hookCalls != 1 {
		t.Fatalf("hook calls %d", hookCalls)
	}
}

func TestOutgoingRequestMatchedAndFailedOnExit(t *testing.T) {
	// The stand-in answers our first request by id, then ignores the second
	// and exits: the second must fail at once with ErrProcessExited.
	p, col := script(t, `
read -r line
id=$(printf '%s' "$line" | sed 's/.*"request_id":"\([^"]*\)".*/\1/')
printf '{"type":"control_response","response":{"subtype":"success","request_id":"%s","response":{"ok":1}}}\n' "$id"
read -r line
id=$(printf '%s' "$line" | sed 's/.*"request_id":"\([^"]*\)".*/\1/')
printf '{"type":"control_response","response":{"subtype":"error","request_id":"%s","error":"nope"}}\n' "$id"
read -r line
sleep 0.2
exit 3
`, Handlers{})
	// A request that is never answered would wait for this deadline and
	// fail with it instead of ErrProcessExited.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := p.Request(ctx, "set_model", map[string]any{"model": "x"})
	if err != nil || string(resp) != `{"ok":1}` {
		t.Fatalf("first request: %s %v", resp, err)
	}
	_, err = p.Request(ctx, "set_permission_mode", map[string]any{"mode": "default"})
	var ce *ControlError
	if !errors.As(err, &ce) || ce.Message != "nope" {
		t.Fatalf("error response: %v", err)
	}
	_, err = p.Request(ctx, "interrupt", nil)
	if !errors.Is(err, ErrProcessExited) {
		t.Fatalf("request to an exiting process: %v", err)
	}
	if exit := col.wait(t); !errors.Is(exit, ErrProcessExited) || !strings.Contains(exit.Error(), "exit status 3") {
		t.Fatalf("exit error %v", exit)
	}
	if _, err := p.Request(ctx, "interrupt", nil); !errors.Is(err, ErrProcessExited) {
		t.Fatalf("request after exit: %v", err)
	}
	if err := p.SendUser("hi", nil, "", PriorityLater); !errors.Is(err, ErrProcessExited) {
		t.Fatalf("send after exit: %v", err)
	}
}

func TestCancelRequestCancelsHandler(t *testing.T) {
	started := make(chan struct{})
	cancelled := make(chan struct{})
	h := Handlers{CanUseTool: func(ctx context.Context, req *ControlRequest) (PermissionResult, error) {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return PermissionResult{Message: "cancelled"}, nil
	}}
	_, col := script(t, `
echo '{"type":"control_request","request_id":"c1","request":{"subtype":"can_use_tool","tool_name":"Write","input":{}}}'
sleep 0.3
echo '{"type":"control_cancel_request","request_id":"c1"}'
`+echoBack, h)
	<-started
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("handler not cancelled")
	}
	col.wait(t)
	if a := answerOf(t, col.all(), "c1"); a["subtype"] != "error" {
		t.Fatalf("cancelled request answered %v", a)
	}
}

func TestCloseEscalatesToKill(t *testing.T) {
	// A child that ignores stdin EOF and SIGTERM is killed within bounds.
	p, col := script(t, `trap '' TERM; while :; do sleep 0.05; done`, Handlers{})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := col.wait(t); err != nil {
		t.Fatalf("exit after Close should be clean, got %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

func TestCloseLeavesNoGroupMemberBehind(t *testing.T) {
	// The CLI's own children (a tool's shell, say) are in its process
	// group; one that outlives the CLI is killed with it, and Close returns
	// only once the whole group is gone.
	p, col := script(t, `(trap "" TERM HUP; exec sleep 30 </dev/null >/dev/null 2>&1) & cat >/dev/null`, Handlers{})
	pid := p.Pid()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := col.wait(t); err != nil {
		t.Fatalf("exit after Close should be clean, got %v", err)
	}
	// SIGKILL is on its way to the sleep when Close returns; it ends at
	// once.
	if live := procgroup.WaitGone(pid, 10*time.Second); len(live) != 0 {
		t.Fatalf("process group %d still has %v after Close", pid, live)
	}
}

func TestCleanEnv(t *testing.T) {
	for _, tc := range []struct {
		name       string
		env, extra []string
		want       string
	}{
		{"drops what is not the child's", []string{"PATH=/bin", "CLAUDECODE=1", "CLAUDE_CODE_ENTRYPOINT=cli", "MAJOR_AUTH_FILE=/secret", "HOME=/h"}, []string{"X=1"},
			"PATH=/bin HOME=/h X=1 DISABLE_AUTOUPDATER=1 DISABLE_UPDATES=1"},
		{"updates stay off whatever the server's environment says", []string{"DISABLE_AUTOUPDATER=0", "DISABLE_UPDATES=", "CLAUDE_CODE_PACKAGE_MANAGER_AUTO_UPDATE=1", "PATH=/bin"}, nil,
			"PATH=/bin DISABLE_AUTOUPDATER=1 DISABLE_UPDATES=1"},
		{"and whatever extra says", nil, []string{"DISABLE_UPDATES=0", "HOME=/h"},
			"HOME=/h DISABLE_AUTOUPDATER=1 DISABLE_UPDATES=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(CleanEnv(tc.env, tc.extra...), " "); got != tc.want {
				t.Fatalf("clean env\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// Anything in the sandbox can write control requests onto the CLI's
// output, each of which would get a goroutine of the server's: at most
// MaxControlRequests of one process are answered at once (however their
// ids repeat), one more gets an error at once, and a slot freed serves
// the next.
func TestControlRequestsBoundedPerProcess(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	calls := 0
	h := Handlers{CanUseTool: func(ctx context.Context, req *ControlRequest) (PermissionResult, error) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n <= MaxControlRequests {
			<-release
		}
		return PermissionResult{Message: "no"}, nil
	}}
	request := func(id string) string {
		return `echo '{"type":"control_request","request_id":"` + id + `","request":{"subtype":"can_use_tool","tool_name":"Write","input":{}}}'` + "\n"
	}
	_, col := script(t, `for i in $(seq `+strconv.Itoa(MaxControlRequests)+`); do `+strings.TrimSpace(request("same"))+`; done
`+request("over")+echoBack+`for i in $(seq `+strconv.Itoa(MaxControlRequests)+`); do read -r line; done
`+request("after")+echoBack, h)
	// The refusal is the first answer: the others wait for release.
	waitAnswered(col, "over")
	close(release)
	col.wait(t)
	msgs := col.all()
	if a := answerOf(t, msgs, "over"); a["subtype"] != "error" || !strings.Contains(fmt.Sprint(a["error"]), "at once") {
		t.Errorf("the request past the bound answered %v", a)
	}
	if a := answerOf(t, msgs, "after"); a["subtype"] != "success" {
		t.Errorf("the request after the others ended answered %v", a)
	}
	if calls != MaxControlRequests+1 {
		t.Errorf("%d requests handled, want %d", calls, MaxControlRequests+1)
	}
}

// waitAnswered waits (up to 30 s) until col holds the echo of an answer
// to id; what the answer was is for the test to check.
func waitAnswered(col *collector, id string) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, m := range col.all() {
			if m.Type == "echo" && strings.Contains(string(m.Raw), `"request_id":"`+id+`"`) {
				return
			}
		}
	}
}

// A line longer than any the CLI writes (anything in the sandbox can write
// onto its output) is skipped as it is read, not kept; the next line is
// read as usual.
func TestLinePastTheLimitIsSkipped(t *testing.T) {
	_, col := script(t, `{ printf '{"type":"system","subtype":"long","pad":"'; head -c `+strconv.Itoa(DefaultMaxLine)+` /dev/zero | tr '\0' a; printf '"}\n'; }
echo '{"type":"system","subtype":"after"}'`, Handlers{})
	col.wait(t)
	msgs := col.all()
	if len(msgs) != 1 || msgs[0].Subtype != "after" {
		t.Fatalf("got %d messages, want only the one after the long line", len(msgs))
	}
}

// Each request being answered holds what it carries, and a line may be
// 64 MiB: the requests of one process being answered hold at most
// MaxControlBytes together; one that would pass it gets an error at
// once, and one that fits in what is left is answered.
func TestControlRequestsBoundedInBytes(t *testing.T) {
	release := make(chan struct{})
	h := Handlers{CanUseTool: func(ctx context.Context, req *ControlRequest) (PermissionResult, error) {
		if req.ToolUseID == "held" {
			<-release
		}
		return PermissionResult{Message: "no"}, nil
	}}
	// held takes all but a kilobyte of the bound; over needs more.
	request := func(id string, pad int) string {
		return `printf '{"type":"control_request","request_id":"` + id + `","request":{"subtype":"can_use_tool","tool_name":"Write","tool_use_id":"` + id + `","input":{"pad":"%s"}}}\n' "$(head -c ` + strconv.Itoa(pad) + ` /dev/zero | tr '\0' a)"` + "\n"
	}
	_, col := script(t, request("held", MaxControlBytes-1<<10)+request("over", 2<<10)+echoBack+request("fits", 10)+echoBack, h)
	waitAnswered(col, "fits")
	close(release)
	col.wait(t)
	msgs := col.all()
	if a := answerOf(t, msgs, "over"); a["subtype"] != "error" || !strings.Contains(fmt.Sprint(a["error"]), "at once") {
		t.Errorf("the request past the bound answered %v", a)
	}
	if a := answerOf(t, msgs, "fits"); a["subtype"] != "success" {
		t.Errorf("the request within the bound answered %v", a)
	}
}
