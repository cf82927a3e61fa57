package vault

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestExplainNeverRepeatsGit(t *testing.T) {
	gitSays := &gitError{args: []string{"push"}, err: errors.New("exit status 128"),
		output: "fatal: unable to access 'https://bot:s3cret@git.example/notes.git/': /srv/vault"}
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{&SyncError{Step: "push", Err: gitSays}, "sending them to the shared repository failed"},
		{errors.Join(&SyncError{Step: "push", Err: gitSays}, &RefusedPathsError{Paths: []string{"a/.GIT/x"}}), "sending them to the shared repository failed"},
		{&SyncError{Step: "commit", Err: gitSays}, "recording them in git failed"},
		{&RefusedPathsError{Paths: []string{"a/.GIT/x"}}, "except a/.GIT/x"},
		{fmt.Errorf("git pull: %w", errWritesOpen), "synced with the shared repository with the next change"},
		{fmt.Errorf("git pull: %w", gitSays), "syncing them with git failed"},
		{fmt.Errorf("wait for git queue: %w", context.DeadlineExceeded), "could not record them in git in time"},
		{&SyncError{Step: "commit", Err: &gitError{args: []string{"commit"}, err: fmt.Errorf("%w (signal: killed)", context.Canceled)}}, "could not record them in git in time"},
		{errors.Join(&SyncError{Step: "pull", Err: fmt.Errorf("%w: %w", ErrRemoteTimeout, gitSays)}, &RefusedPathsError{Paths: []string{"a/.GIT/x"}}), "did not answer in time"},
	} {
		got := Explain(c.err)
		if !strings.Contains(got, c.want) || (c.want == "" && got != "") {
			t.Errorf("Explain(%v) = %q, want it to say %q", c.err, got, c.want)
		}
		for _, secret := range []string{"s3cret", "/srv/vault", "fatal", "exit status"} {
			if strings.Contains(got, secret) {
				t.Errorf("Explain(%v) repeats %q", c.err, secret)
			}
		}
	}
}
