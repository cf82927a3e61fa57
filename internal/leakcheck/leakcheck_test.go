package leakcheck

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// A goroutine still blocked at the end is reported; one on its way out
// within the time given is not.
func TestFind(t *testing.T) {
	before := goleak.IgnoreCurrent()
	stop := make(chan struct{})
	go func() { <-stop }()
	if err := find(300*time.Millisecond, before); err == nil || !strings.Contains(err.Error(), "TestFind") {
		t.Fatalf("a blocked goroutine was not reported: %v", err)
	}
	time.AfterFunc(time.Second, func() { close(stop) })
	if err := find(20*time.Second, before); err != nil {
		t.Fatalf("a goroutine that ended in time was reported: %v", err)
	}
}
