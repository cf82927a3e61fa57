package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/majorhq/major/personstate"
	"github.com/majorhq/major/ring"
	"github.com/majorhq/major/vault"
)

const personUsage = `usage: major person export [--state-dir DIR] [--vault-root DIR] NAME FILE
       major person import [--state-dir DIR] [--replace] FILE
       major person list [--state-dir DIR] [--hash-ring HAPROXY.CFG [--server NAME]]`

// person is `major person export|import|list`: a person's state moved
// between servers as one archive, and which persons a proxy's servers
// should hold. Where a server runs on the state directory it is asked
// through its control socket (it stops the person's chats first);
// otherwise the directory is changed here, under its lock.
func person(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, personUsage)
		return errors.New("person needs export, import or list")
	}
	fs := flag.NewFlagSet("major person "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	state := fs.String("state-dir", "", "the server's state directory (MAJOR_STATE_DIR; default $XDG_STATE_HOME/major or ~/.local/state/major)")
	replace := fs.Bool("replace", false, "import: replace the state the person has on this server")
	ringFile := fs.String("hash-ring", "", "list: the HAProxy configuration whose servers the persons are spread over")
	vaultRoot := fs.String("vault-root", "", "export without a running server: the server's vault root, so the importing server finds the person's conversations (MAJOR_VAULT_ROOT)")
	server := fs.String("server", "", "list: this server's name in the HAProxy configuration: only the persons to move away from it are listed")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *state == "" {
		*state = getenv("MAJOR_STATE_DIR")
	}
	if *state == "" {
		*state = defaultStateDir(getenv)
	}
	stateDir, err := filepath.Abs(*state)
	if err != nil {
		return err
	}
	switch {
	case args[0] == "export" && fs.NArg() == 2:
		if err := vault.CheckPerson(fs.Arg(0)); err != nil {
			return fmt.Errorf("person %q: %w", fs.Arg(0), err)
		}
		if *vaultRoot == "" {
			*vaultRoot = getenv("MAJOR_VAULT_ROOT")
		}
		vaultDir := ""
		if *vaultRoot != "" {
			root, err := filepath.Abs(*vaultRoot)
			if err != nil {
				return err
			}
			vaultDir = filepath.Join(root, fs.Arg(0))
		}
		return exportPerson(ctx, stateDir, fs.Arg(0), fs.Arg(1), vaultDir, stdout)
	case args[0] == "import" && fs.NArg() == 1:
		return importPerson(ctx, stateDir, fs.Arg(0), *replace, stdout)
	case args[0] == "list" && fs.NArg() == 0:
		return listPersons(stateDir, *ringFile, *server, stdout)
	}
	fmt.Fprintln(stderr, personUsage)
	return fmt.Errorf("person %s: wrong arguments", args[0])
}

// controlClient is an HTTP client of the server's control socket in
// stateDir, or nil when no server answers there.
func controlClient(ctx context.Context, stateDir string) *http.Client {
	path := filepath.Join(stateDir, controlSocket)
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil
	}
	c.Close()
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", path) },
	}}
}

// controlError is the server's answer as an error, unless it is 2xx.
func controlError(resp *http.Response) error {
	if resp.StatusCode/100 == 2 {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return fmt.Errorf("the server: %s", strings.TrimSpace(string(b)))
}

// exportPerson writes person's archive to file: beside it first, renamed
// once whole, and only then is the person's folder moved aside on the
// server (a failed export leaves them served where they are).
func exportPerson(ctx context.Context, stateDir, person, file, vaultDir string, stdout io.Writer) error {
	if _, err := os.Lstat(file); err == nil {
		return fmt.Errorf("%s exists; name a new file", file)
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".partial-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	write := func(src io.Reader) error {
		if _, err := io.Copy(tmp, src); err != nil {
			return fmt.Errorf("write the archive: %w", err)
		}
		if err := tmp.Sync(); err != nil {
			return err
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		return os.Rename(tmp.Name(), file)
	}
	if client := controlClient(ctx, stateDir); client != nil {
		post := func(what string) (*http.Response, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://major/persons/"+person+"/"+what, nil)
			if err != nil {
				return nil, err
			}
			return client.Do(req)
		}
		resp, err := post("export")
		if err != nil {
			return fmt.Errorf("ask the server: %w", err)
		}
		defer resp.Body.Close()
		if err := controlError(resp); err != nil {
			return err
		}
		if err := write(resp.Body); err != nil {
			if r, rerr := post("resume"); rerr == nil {
				r.Body.Close()
			}
			return err
		}
		done, err := post("exported")
		if err != nil {
			return fmt.Errorf("the archive %s is whole, but the server did not hear so (%w): %s stays refused there until it restarts", file, err, person)
		}
		defer done.Body.Close()
		if err := controlError(done); err != nil {
			return err
		}
		var aside struct {
			KeptAt string `json:"kept_at"`
		}
		_ = json.NewDecoder(done.Body).Decode(&aside)
		fmt.Fprintf(stdout, "exported %s to %s (the running server refuses them from now on; their folder is kept at %s)\n", person, file, aside.KeptAt)
		return nil
	}
	unlock, err := lockState(stateDir)
	if err != nil {
		return fmt.Errorf("%w, but its control socket does not answer", err)
	}
	defer unlock()
	pr, pw := io.Pipe()
	go func() {
		_, err := personstate.Export(pw, stateDir, person, vaultDir)
		pw.CloseWithError(err)
	}()
	if err := write(pr); err != nil {
		return err
	}
	aside, err := personstate.MoveAside(stateDir, person)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "exported %s to %s (their folder is kept at %s)\n", person, file, aside)
	return nil
}

// importPerson takes the archive in file into stateDir: through the
// running server, which serves the person's chats at once, or directly.
func importPerson(ctx context.Context, stateDir, file string, replace bool, stdout io.Writer) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	var got personstate.Imported
	if client := controlClient(ctx, stateDir); client != nil {
		url := "http://major/persons/import"
		if replace {
			url += "?replace=1"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, f)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("ask the server: %w", err)
		}
		defer resp.Body.Close()
		if err := controlError(resp); err != nil {
			return err
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			return fmt.Errorf("the server's answer: %w", err)
		}
	} else {
		unlock, err := lockState(stateDir)
		if err != nil {
			return fmt.Errorf("%w, but its control socket does not answer", err)
		}
		defer unlock()
		if got, err = personstate.Import(f, stateDir, replace, nil); err != nil {
			return err
		}
	}
	how := "imported"
	if got.Replaced {
		how = "replaced"
	}
	fmt.Fprintf(stdout, "%s %s: %d files, %d bytes\n", how, got.Person, got.Files, got.Bytes)
	return nil
}

// listPersons lists the persons with state in stateDir and what they
// hold; with a ring, the server each belongs on, and with server, only
// those that belong elsewhere.
func listPersons(stateDir, ringFile, server string, stdout io.Writer) error {
	persons, err := personstate.List(stateDir)
	if err != nil {
		return err
	}
	var r *ring.Ring
	if ringFile != "" {
		servers, err := ring.ReadConfig(ringFile)
		if err != nil {
			return err
		}
		if server != "" && !hasServer(servers, server) {
			return fmt.Errorf("--server %s is not a server of %s", server, ringFile)
		}
		if r, err = ring.New(servers); err != nil {
			return fmt.Errorf("%s: %w", ringFile, err)
		}
	} else if server != "" {
		return errors.New("--server needs --hash-ring")
	}
	var out bytes.Buffer
	for _, p := range persons {
		st, err := personstate.Inspect(personstate.Dir(stateDir, p))
		if err != nil {
			return err
		}
		if st.Empty() {
			continue
		}
		switch {
		case r == nil:
			fmt.Fprintf(&out, "%s\t%s\n", p, st)
		case server == "":
			fmt.Fprintf(&out, "%s\t%s\t%s\n", p, r.Server(p), st)
		case r.Server(p) != server:
			fmt.Fprintf(&out, "%s\t%s\t%s\n", p, r.Server(p), st)
		}
	}
	_, err = stdout.Write(out.Bytes())
	return err
}

func hasServer(servers []ring.Server, name string) bool {
	for _, s := range servers {
		if s.Name == name {
			return true
		}
	}
	return false
}
