package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/majorhq/major/clihome"
	"github.com/majorhq/major/mcpserver"
	"github.com/majorhq/major/notify"
	"github.com/majorhq/major/personstate"
	"github.com/majorhq/major/relay"
	"github.com/majorhq/major/supervisor"
	"github.com/majorhq/major/vault"
)

// The files of the state directory that tell a running server: its lock,
// held while it runs, and the socket `major person` asks it through.
const (
	serverLockFile = "server.lock"
	controlSocket  = "major.sock"
)

// lockState takes the state directory's lock, which one process holds at
// a time: the server while it runs, or `major person` while it changes
// the directory without one. It fails at once if another holds it.
func lockState(stateDir string) (release func(), err error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(stateDir, serverLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another process holds the state directory %s (%s)", stateDir, serverLockFile)
	}
	return func() { f.Close() }, nil
}

// mover moves persons out of and into the running server, asked through
// the control socket in the state directory (`major person export` and
// `import`). While a person moves all their requests are refused (503,
// Retry-After): a released person's state is written by nothing here.
type mover struct {
	stateDir    string
	vaultRoot   string
	sessions    *relay.Registry
	terminals   *terminalSet // nil without terminals
	pool        *supervisor.Pool
	notifier    *notify.Service // nil without notifications
	unconfirmed *mcpserver.Unconfirmed
	log         zerolog.Logger

	mu     sync.Mutex
	moving map[string]bool
}

// Moving reports whether person's requests are refused as they move.
func (m *mover) Moving(person string) bool {
	m.mu.Lock()
	moving := m.moving[person]
	m.mu.Unlock()
	return moving || m.sessions.Moving(person)
}

// hold stops everything of person's that writes their folder: their
// requests are refused from now on, their terminals end, their chats end
// (turns interrupted, logs and usage written) and their waiting
// processes stop.
func (m *mover) hold(ctx context.Context, person string) error {
	m.mu.Lock()
	if m.moving == nil {
		m.moving = map[string]bool{}
	}
	m.moving[person] = true
	m.mu.Unlock()
	if m.terminals != nil {
		if _, err := m.terminals.EndPerson(ctx, person); err != nil {
			return err
		}
	}
	if err := m.sessions.Release(ctx, person); err != nil {
		return err
	}
	return m.pool.Release(ctx, person)
}

// resume serves person again from what their folder holds now (their
// state came in, or stayed when a move failed).
func (m *mover) resume(person string) error {
	var errs []error
	if err := settleMoved(m.stateDir, person, filepath.Join(m.vaultRoot, person)); err != nil {
		errs = append(errs, err)
	}
	if _, err := m.sessions.Adopt(person); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, m.reload(person))
	m.mu.Lock()
	delete(m.moving, person)
	m.mu.Unlock()
	return errors.Join(errs...)
}

// reload reads the person's notification and LinkedIn records again.
func (m *mover) reload(person string) error {
	var errs []error
	if m.notifier != nil {
		errs = append(errs, m.notifier.Reload(person))
	}
	if m.unconfirmed != nil {
		errs = append(errs, m.unconfirmed.Reload(person))
	}
	return errors.Join(errs...)
}

// serve answers on the control socket until ctx ends:
//
//	POST /persons/{name}/export    hold the person, answer their archive
//	POST /persons/{name}/exported  the archive is safe: their folder goes aside
//	POST /persons/{name}/resume    the export failed: serve them again
//	POST /persons/import[?replace=1]  the body is an archive: take it in
//
// Only processes that may open the socket in the state directory (its
// owner's) reach it.
func (m *mover) serve(ctx context.Context) (stop func(), err error) {
	path := filepath.Join(m.stateDir, controlSocket)
	_ = os.Remove(path) // a socket left by a server that ended uncleanly
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("the control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /persons/{name}/export", m.export)
	mux.HandleFunc("POST /persons/{name}/exported", m.exported)
	mux.HandleFunc("POST /persons/{name}/resume", m.resumeHandler)
	mux.HandleFunc("POST /persons/import", m.importHandler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(c)
		_ = os.Remove(path)
	}, nil
}

func (m *mover) export(w http.ResponseWriter, r *http.Request) {
	person := r.PathValue("name")
	if err := vault.CheckPerson(person); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	dir := personstate.Dir(m.stateDir, person)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		http.Error(w, person+" has no state on this server", http.StatusNotFound)
		return
	}
	if err := m.hold(r.Context(), person); err != nil {
		m.log.Error().Err(err).Str("person", person).Msg("could not stop the person's chats to export them; they are served again")
		_ = m.resume(person)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	c, err := personstate.Export(w, m.stateDir, person, filepath.Join(m.vaultRoot, person))
	if err != nil {
		// Cut off: the client must not take this for an archive.
		m.log.Error().Err(err).Str("person", person).Msg("export failed; the person is served again")
		_ = m.resume(person)
		panic(http.ErrAbortHandler)
	}
	m.log.Info().Str("person", person).Int("files", c.Files).Int64("bytes", c.Bytes).Msg("exported the person; their requests are refused until the proxy sends them elsewhere")
}

func (m *mover) exported(w http.ResponseWriter, r *http.Request) {
	person := r.PathValue("name")
	if !m.Moving(person) {
		http.Error(w, person+" is not being exported", http.StatusConflict)
		return
	}
	aside, err := personstate.MoveAside(m.stateDir, person)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if err := m.reload(person); err != nil {
		m.log.Warn().Err(err).Str("person", person).Msg("reading the moved person's records again")
	}
	m.log.Info().Str("person", person).Str("kept_at", aside).Msg("the person moved to another server; their earlier folder is kept aside")
	writeJSON(w, map[string]string{"kept_at": aside})
}

func (m *mover) resumeHandler(w http.ResponseWriter, r *http.Request) {
	person := r.PathValue("name")
	if err := m.resume(person); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, map[string]string{"resumed": person})
}

func (m *mover) importHandler(w http.ResponseWriter, r *http.Request) {
	replace := r.URL.Query().Get("replace") == "1"
	held := ""
	got, err := personstate.Import(r.Body, m.stateDir, replace, func(person string) error {
		held = person
		return m.hold(r.Context(), person)
	})
	if held != "" {
		if rerr := m.resume(held); rerr != nil {
			m.log.Warn().Err(rerr).Str("person", held).Msg("serving the person after an import")
		}
	}
	if err != nil {
		status := http.StatusInternalServerError
		switch {
		case errors.Is(err, personstate.ErrExists):
			status = http.StatusConflict
		case errors.Is(err, personstate.ErrNotArchive), errors.Is(err, personstate.ErrTruncated):
			status = http.StatusBadRequest
		}
		http.Error(w, err.Error(), status)
		return
	}
	m.log.Info().Str("person", got.Person).Int("files", got.Files).Bool("replaced", got.Replaced).Msg("imported the person")
	writeJSON(w, got)
}

// settleMoved moves what the CLI keeps by the path of person's vault
// folder on the server their state came from to where it looks for it
// here (dir), so their conversations resume.
func settleMoved(stateDir, person, dir string) error {
	from, err := personstate.MovedFrom(stateDir, person)
	if err != nil || from == "" {
		return err
	}
	if err := clihome.Rehome(stateDir, person, from, dir); err != nil {
		return err
	}
	return personstate.Settled(stateDir, person)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
