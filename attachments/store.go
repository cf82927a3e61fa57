package attachments

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"sync"
	"time"

	"github.com/majorhq/major/vault"
)

// Errors of the package; each message names the file and the rule.
var (
	// ErrBadName refuses a file name (CheckName).
	ErrBadName = errors.New("refused file name")
	// ErrMismatch refuses a file whose declared media type is another
	// kind than its content, or an image that cannot be read.
	ErrMismatch = errors.New("refused file")
	// ErrTooLarge refuses a file, or the files of a message, over a
	// size bound.
	ErrTooLarge = errors.New("too large")
	// ErrTooMany refuses more files in one message than it may have.
	ErrTooMany = errors.New("too many files")
	// ErrCutOff is an upload whose body ended before its file did.
	ErrCutOff = errors.New("the upload was cut off")
	// ErrUnknown is an attachment id that names no uploaded file.
	ErrUnknown = errors.New("unknown attachment")
	// ErrBadNote is an attached note that cannot be attached (missing,
	// a folder).
	ErrBadNote = errors.New("cannot attach note")
)

// Dir is the folder of the person's vault that uploads go to, one
// subfolder per month (attachments/2026-05/).
const Dir = "attachments"

// Limits bound what one message may carry.
type Limits struct {
	// FileBytes bounds one file (default 20 MiB); Files the files of one
	// message (default 10); MessageBytes all of them together (default
	// 50 MiB).
	FileBytes    int64
	Files        int
	MessageBytes int64
	// ImageEdge is the longest side, in pixels, of an image the model is
	// sent (default 2000: what the Messages API accepts in a request
	// with many images); a larger one is scaled down, the original kept
	// in the vault.
	ImageEdge int
	// NoteBytes bounds the text of one attached note or text file the
	// model is sent (default 100 KiB); a longer one is cut, with a line
	// saying so.
	NoteBytes int
}

// DefaultLimits are the bounds when none are configured.
func DefaultLimits() Limits {
	return Limits{FileBytes: 20 << 20, Files: 10, MessageBytes: 50 << 20, ImageEdge: 2000, NoteBytes: 100 << 10}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.FileBytes <= 0 {
		l.FileBytes = d.FileBytes
	}
	if l.Files <= 0 {
		l.Files = d.Files
	}
	if l.MessageBytes <= 0 {
		l.MessageBytes = d.MessageBytes
	}
	if l.ImageEdge <= 0 {
		l.ImageEdge = d.ImageEdge
	}
	if l.NoteBytes <= 0 {
		l.NoteBytes = d.NoteBytes
	}
	return l
}

// Writes keeps git syncs from pulling while a file is being written into
// the vault's work tree (vault.GitSync: a pull's autostash would take
// the half-written file away).
type Writes interface {
	BeginWrite(ctx context.Context, session, id string) error
	EndWrite(session, id string)
}

// Config configures a Store.
type Config struct {
	// VaultRoot holds one folder per person.
	VaultRoot string
	Limits    Limits
	// Writes, when set, holds syncs off while a file is written.
	Writes Writes
	// KeepIDs is how long an uploaded file can be named by its id in a
	// message (default 24h); the file itself stays in the vault.
	KeepIDs time.Duration
	Now     func() time.Time
}

// File is an uploaded file, as clients see it: its id, the name it was
// sent with, where it is in the person's folder, its media type (sniffed)
// and size.
type File struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Path      string `json:"path"`
	MediaType string `json:"media_type"`
	Size      int64  `json:"size"`

	// sum is the SHA-256 of the content, for telling a resend of the
	// same files.
	sum [sha256.Size]byte
}

// Store saves uploads into persons' vaults and makes the content blocks
// of a message.
type Store struct {
	cfg   Config
	guard vault.Guard

	mu sync.Mutex
	// known are the files uploaded lately, by person and id.
	known map[string]map[string]knownFile
}

type knownFile struct {
	file  File
	until time.Time
}

// New returns a Store.
func New(cfg Config) *Store {
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.KeepIDs <= 0 {
		cfg.KeepIDs = 24 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Store{cfg: cfg, guard: vault.Guard{VaultRoot: cfg.VaultRoot}, known: map[string]map[string]knownFile{}}
}

// Limits are the store's bounds.
func (s *Store) Limits() Limits { return s.cfg.Limits }

// Upload is the files of one request, written into the person's vault as
// they arrive. Keep makes them stay; Discard removes every one of them,
// so a request that fails halfway leaves nothing behind.
type Upload struct {
	s      *Store
	ctx    context.Context
	person string
	files  []File
	bytes  int64
	done   bool
	// made are the folders the upload made, outermost first: removed
	// again, when empty, if it saves nothing.
	made []string
}

// removeFolders removes the folders the upload made if they are empty.
func (u *Upload) removeFolders(root *os.Root) {
	for i := len(u.made) - 1; i >= 0; i-- {
		_ = root.Remove(u.made[i]) // fails, as it should, when not empty
	}
}

// Begin starts the upload of one request's files for person.
func (s *Store) Begin(ctx context.Context, person string) *Upload {
	return &Upload{s: s, ctx: ctx, person: person}
}

// Files are the files saved so far.
func (u *Upload) Files() []File { return append([]File(nil), u.files...) }

// Add saves one file, named name (CheckName) and declared by the client
// as declared (may be empty), read from r. It is refused, and nothing of
// it stays, when its name is refused, it is over a bound, its content
// contradicts its declared type, or r ends in an error (a body cut off).
func (u *Upload) Add(name, declared string, r io.Reader) (File, error) {
	lim := u.s.cfg.Limits
	if err := CheckName(name); err != nil {
		return File{}, err
	}
	if len(u.files) >= lim.Files {
		return File{}, fmt.Errorf("%w: a message may carry at most %d files", ErrTooMany, lim.Files)
	}
	root, err := u.s.root(u.person)
	if err != nil {
		return File{}, err
	}
	defer root.Close()
	month := path.Join(Dir, u.s.cfg.Now().UTC().Format("2006-01"))
	for _, d := range []string{Dir, month} {
		if _, err := root.Lstat(d); errors.Is(err, fs.ErrNotExist) {
			u.made = append(u.made, d)
		}
	}
	if err := root.MkdirAll(month, 0o755); err != nil {
		return File{}, fmt.Errorf("make %s: %w", month, err)
	}
	id := newID()
	if w := u.s.cfg.Writes; w != nil {
		if err := w.BeginWrite(u.ctx, "upload:"+u.person, id); err != nil {
			return File{}, fmt.Errorf("save %q: %w", name, err)
		}
		defer w.EndWrite("upload:"+u.person, id)
	}
	temp := path.Join(month, ".upload-"+id)
	f, err := root.OpenFile(temp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return File{}, fmt.Errorf("save %q: %w", name, err)
	}
	file, kind, err := u.write(f, name, declared, r)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("save %q: %w", name, cerr)
	}
	if err == nil && kind == Image {
		err = checkStoredImage(root, temp, name, file.MediaType)
	}
	if err == nil {
		file.Path, err = linkFree(root, temp, month, name)
	}
	_ = root.Remove(temp)
	if err != nil {
		u.removeFolders(root)
		return File{}, err
	}
	file.ID = id
	u.files = append(u.files, file)
	u.bytes += file.Size
	return file, nil
}

// write copies r into f within the bounds and tells what it is.
func (u *Upload) write(f io.Writer, name, declared string, r io.Reader) (File, Kind, error) {
	lim := u.s.cfg.Limits
	room := lim.MessageBytes - u.bytes
	sum := sha256.New()
	head := &headBuffer{max: sniffLen}
	n, err := io.Copy(io.MultiWriter(f, sum, head), io.LimitReader(r, lim.FileBytes+1))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return File{}, Other, fmt.Errorf("%w: the request is more than the %s it may have", ErrTooLarge, Size(tooBig.Limit))
	case err != nil:
		return File{}, Other, fmt.Errorf("%w while %q was being received (%v); nothing was saved", ErrCutOff, name, err)
	case n > lim.FileBytes:
		return File{}, Other, fmt.Errorf("%w: %q is more than the %s one file may have", ErrTooLarge, name, Size(lim.FileBytes))
	case n > room:
		return File{}, Other, fmt.Errorf("%w: the files of one message may have %s together; %q does not fit", ErrTooLarge, Size(lim.MessageBytes), name)
	}
	mt, kind := Sniff(name, head.b)
	if err := checkDeclared(name, declared, mt, kind); err != nil {
		return File{}, Other, err
	}
	file := File{Name: name, MediaType: mt, Size: n}
	copy(file.sum[:], sum.Sum(nil))
	return file, kind, nil
}

// linkFree gives the file at temp its name in folder: name, or name with
// a suffix when that is taken (" (2)", " (3)", ...). A hard link never
// replaces a file, so a name taken meanwhile is skipped, not overwritten.
func linkFree(root *os.Root, temp, folder, name string) (string, error) {
	for n := 1; n <= 1000; n++ {
		candidate := name
		if n > 1 {
			candidate = withSuffix(name, n)
		}
		if len(candidate) > maxNameBytes {
			break
		}
		dest := path.Join(folder, candidate)
		err := root.Link(temp, dest)
		if err == nil {
			return dest, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("save %q: %w", name, err)
		}
	}
	return "", fmt.Errorf("%w: the folder %s has too many files named %q", ErrBadName, folder, name)
}

// checkStoredImage refuses the image written at temp if it cannot be
// read or is too large to decode.
func checkStoredImage(root *os.Root, temp, name, mediaType string) error {
	f, err := root.Open(temp)
	if err != nil {
		return fmt.Errorf("save %q: %w", name, err)
	}
	defer f.Close()
	return checkImage(name, mediaType, f)
}

// Keep makes the files stay and remembers their ids for later messages.
func (u *Upload) Keep() {
	if u.done {
		return
	}
	u.done = true
	u.s.remember(u.person, u.files)
}

// Discard removes every file of the upload from the vault. After Keep it
// does nothing.
func (u *Upload) Discard() {
	if u.done {
		return
	}
	u.done = true
	if len(u.files) == 0 && len(u.made) == 0 {
		return
	}
	root, err := u.s.root(u.person)
	if err != nil {
		return
	}
	defer root.Close()
	for _, f := range u.files {
		_ = root.Remove(f.Path)
	}
	u.files = nil
	u.removeFolders(root)
}

// Lookup is the files uploaded ahead with these ids, in order.
func (s *Store) Lookup(person string, ids []string) ([]File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	out := make([]File, 0, len(ids))
	for _, id := range ids {
		k, ok := s.known[person][id]
		if !ok || now.After(k.until) {
			return nil, fmt.Errorf("%w %q: no file was uploaded with that id lately; upload it again", ErrUnknown, id)
		}
		out = append(out, k.file)
	}
	return out, nil
}

// remember records files under their ids, and forgets expired ones.
func (s *Store) remember(person string, files []File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	m := s.known[person]
	if m == nil {
		m = map[string]knownFile{}
		s.known[person] = m
	}
	for id, k := range m {
		if now.After(k.until) {
			delete(m, id)
		}
	}
	for _, f := range files {
		m[f.ID] = knownFile{file: f, until: now.Add(s.cfg.KeepIDs)}
	}
}

// root opens the person's folder; nothing written through it can land
// outside, whatever links the folder holds.
func (s *Store) root(person string) (*os.Root, error) {
	folder, err := s.guard.Folder(person)
	if err != nil {
		return nil, err
	}
	return os.OpenRoot(folder)
}

func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "att_" + hex.EncodeToString(b)
}

// headBuffer keeps the first max bytes written to it.
type headBuffer struct {
	max int
	b   []byte
}

func (h *headBuffer) Write(p []byte) (int, error) {
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Size is n bytes in words (20 MiB, 512 KiB, 300 bytes).
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
