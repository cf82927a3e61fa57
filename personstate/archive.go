package personstate

import (
	"archive/tar"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/majorhq/major/vault"
)

// The person archive is a gzip-compressed tar file:
//
//	major-person.json        first: {"format": ArchiveFormat, "version": 1, "person": ...}
//	person/...               the person's folder: folders, files, symbolic links (in home/ only)
//	major-person-end.json    last: {"files": N, "bytes": B}, so a cut-off archive is told
//	                         from a whole one even where the cut falls between entries
const (
	// ArchiveFormat names the format in an archive's first entry.
	ArchiveFormat = "major-person-archive"
	// ArchiveVersion is the version written; an archive of another is
	// refused.
	ArchiveVersion = 1

	markerName = "major-person.json"
	endName    = "major-person-end.json"
	folderName = "person/"
)

// Errors of Import, each wrapped with the detail.
var (
	// ErrNotArchive is input that is no person archive of this version.
	ErrNotArchive = errors.New("not a person archive of this server's format")
	// ErrExists is an import of a person who already has state here.
	ErrExists = errors.New("the person already has state on this server")
	// ErrTruncated is an archive that ends before its end entry.
	ErrTruncated = errors.New("the archive is cut off")
)

type marker struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Person  string    `json:"person"`
	Written time.Time `json:"written"`
	// VaultDir is the person's vault folder on the server that wrote
	// the archive: the CLI keeps its transcripts by that path.
	VaultDir string `json:"vault_dir,omitempty"`
}

// Contents counts an archive's files (symbolic links included) and
// their bytes.
type Contents struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// Export writes person's folder of stateDir to w as one archive, naming
// vaultDir, their vault folder here ("" if unknown), for the server that
// takes it in (MovedFrom). Nothing may write the folder meanwhile (the
// server has released the person, or does not run). Sockets, pipes,
// files being replaced and links outside the CLI home are left out.
func Export(w io.Writer, stateDir, person, vaultDir string) (Contents, error) {
	var end Contents
	if err := vault.CheckPerson(person); err != nil {
		return end, err
	}
	dir := Dir(stateDir, person)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return end, fmt.Errorf("%s has no folder in %s", person, stateDir)
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	head, _ := json.Marshal(marker{Format: ArchiveFormat, Version: ArchiveVersion, Person: person, Written: time.Now().UTC(), VaultDir: vaultDir})
	if err := writeEntry(tw, markerName, head); err != nil {
		return end, err
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		name := folderName + filepath.ToSlash(rel)
		if rel == "." {
			name = folderName
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimSuffix(name, "/") + "/", Mode: int64(info.Mode().Perm()), ModTime: info.ModTime()})
		case d.Type()&fs.ModeSymlink != 0 && !strings.HasPrefix(name, folderName+HomeDir+"/"):
			return nil // no server's link; Import takes links in the home only
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			end.Files++
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: link, ModTime: info.ModTime()})
		case !d.Type().IsRegular() || strings.HasPrefix(d.Name(), ".tmp-"):
			return nil
		}
		n, err := copyFileTo(tw, p, name, info)
		end.Files++
		end.Bytes += n
		return err
	})
	if err != nil {
		return end, fmt.Errorf("write %s's folder: %w", person, err)
	}
	tail, _ := json.Marshal(end)
	if err := writeEntry(tw, endName, tail); err != nil {
		return end, err
	}
	if err := tw.Close(); err != nil {
		return end, err
	}
	return end, gz.Close()
}

func writeEntry(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: int64(len(data)), ModTime: time.Now()}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// copyFileTo writes the file at p as the entry name, its size as it is
// when opened.
func copyFileTo(tw *tar.Writer, p, name string, info fs.FileInfo) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(info.Mode().Perm()), Size: st.Size(), ModTime: st.ModTime()}); err != nil {
		return 0, err
	}
	n, err := io.CopyN(tw, f, st.Size())
	if err != nil {
		return n, fmt.Errorf("%s: %w", p, err)
	}
	return n, nil
}

// Imported is what Import took in.
type Imported struct {
	Person string
	Contents
	// Replaced is whether the person had state here, now replaced.
	Replaced bool
}

// Import reads an archive written by Export from r into stateDir: the
// person's folder appears whole or not at all (it is written beside its
// place and renamed there at the end, once the archive proved whole). A
// person who has state here already is refused (ErrExists) unless
// replace; an empty folder (the CLI home the server makes for everyone)
// is no state. check, if set, may refuse the person once their name is
// known, before anything is written.
func Import(r io.Reader, stateDir string, replace bool, check func(person string) error) (Imported, error) {
	var out Imported
	gz, err := gzip.NewReader(r)
	if err != nil {
		return out, fmt.Errorf("%w: %v", ErrNotArchive, err)
	}
	tr := tar.NewReader(gz)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != markerName || hdr.Size > 4096 {
		return out, fmt.Errorf("%w: no %s at its start", ErrNotArchive, markerName)
	}
	var m marker
	if b, err := io.ReadAll(tr); err != nil || json.Unmarshal(b, &m) != nil || m.Format != ArchiveFormat {
		return out, fmt.Errorf("%w: its %s names no known format", ErrNotArchive, markerName)
	}
	if m.Version != ArchiveVersion {
		return out, fmt.Errorf("%w: version %d, this server reads version %d", ErrNotArchive, m.Version, ArchiveVersion)
	}
	if err := vault.CheckPerson(m.Person); err != nil {
		return out, fmt.Errorf("%w: person %q: %v", ErrNotArchive, m.Person, err)
	}
	out.Person = m.Person
	dest := Dir(stateDir, m.Person)
	had, err := Inspect(dest)
	if err != nil {
		return out, err
	}
	if !had.Empty() && !replace {
		return out, fmt.Errorf("%w: %s has %s in %s", ErrExists, m.Person, had, dest)
	}
	if check != nil {
		if err := check(m.Person); err != nil {
			return out, err
		}
		// A chat the person started between the look above and check
		// (which stops their chats) is state as well.
		if had, err = Inspect(dest); err != nil {
			return out, err
		}
		if !had.Empty() && !replace {
			return out, fmt.Errorf("%w: %s has %s in %s", ErrExists, m.Person, had, dest)
		}
	}
	parent := filepath.Join(stateDir, personsDir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return out, err
	}
	staging, err := os.MkdirTemp(parent, ".import-"+m.Person+"-")
	if err != nil {
		return out, err
	}
	defer os.RemoveAll(staging)
	end, err := extract(tr, staging)
	if err != nil {
		return out, err
	}
	// The gzip trailer's checksum is read only at the stream's end.
	if _, err := io.Copy(io.Discard, gz); err != nil {
		return out, fmt.Errorf("%w: %v", ErrTruncated, err)
	}
	out.Contents = end
	if m.VaultDir != "" {
		b, _ := json.Marshal(movedFrom{VaultDir: m.VaultDir})
		if err := os.WriteFile(filepath.Join(staging, MovedFromFile), b, 0o600); err != nil {
			return out, err
		}
	}
	out.Replaced = !had.Empty()
	// The folder there (the person's old state, or the empty home made
	// for them) goes aside first and is removed once the new one is in.
	aside := ""
	if _, err := os.Lstat(dest); err == nil {
		aside = filepath.Join(parent, fmt.Sprintf(".replaced-%s-%s", m.Person, randomSuffix()))
		if err := os.Rename(dest, aside); err != nil {
			return out, fmt.Errorf("move %s's earlier folder aside: %w", m.Person, err)
		}
	}
	if err := os.Rename(staging, dest); err != nil {
		if aside != "" {
			_ = os.Rename(aside, dest)
		}
		return out, fmt.Errorf("put %s's folder in place: %w", m.Person, err)
	}
	if aside != "" {
		_ = os.RemoveAll(aside)
	}
	return out, nil
}

// extract writes the archive's person/ entries into dir, through an
// os.Root so no entry (nor a link it made) reaches outside, and checks
// the end entry against what it wrote.
func extract(tr *tar.Reader, dir string) (Contents, error) {
	var got Contents
	root, err := os.OpenRoot(dir)
	if err != nil {
		return got, err
	}
	defer root.Close()
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got, fmt.Errorf("%w: it ends before %s", ErrTruncated, endName)
		}
		if err != nil {
			return got, fmt.Errorf("%w: %v", ErrTruncated, err)
		}
		if hdr.Name == endName {
			var want Contents
			b, err := io.ReadAll(io.LimitReader(tr, 4096))
			if err != nil || json.Unmarshal(b, &want) != nil {
				return got, fmt.Errorf("%w: a broken %s", ErrTruncated, endName)
			}
			if want != got {
				return got, fmt.Errorf("%w: it holds %d files (%d bytes) of the %d (%d bytes) it names", ErrTruncated, got.Files, got.Bytes, want.Files, want.Bytes)
			}
			if _, err := tr.Next(); !errors.Is(err, io.EOF) {
				return got, fmt.Errorf("%w: entries after %s", ErrNotArchive, endName)
			}
			return got, nil
		}
		rel, ok := strings.CutPrefix(hdr.Name, folderName)
		if !ok {
			return got, fmt.Errorf("%w: entry %q is outside %s", ErrNotArchive, hdr.Name, folderName)
		}
		rel = strings.TrimSuffix(rel, "/")
		if rel == "" {
			continue // the folder itself: dir
		}
		if !fs.ValidPath(rel) || path.Clean(rel) != rel {
			return got, fmt.Errorf("%w: entry %q is no plain path", ErrNotArchive, hdr.Name)
		}
		mode := fs.FileMode(hdr.Mode).Perm() | 0o600
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(rel, mode|0o700)
		case tar.TypeReg:
			err = writeFileIn(root, rel, mode, tr, hdr.Size)
			got.Bytes += hdr.Size
			got.Files++
		case tar.TypeSymlink:
			// Links are the sandbox's, in the CLI home; the server makes
			// none. One elsewhere (the home itself, a session) would
			// have the server, or the home's mount, reach outside.
			if !strings.HasPrefix(rel, HomeDir+"/") {
				return got, fmt.Errorf("%w: entry %q is a link outside %s/", ErrNotArchive, hdr.Name, HomeDir)
			}
			err = root.Symlink(hdr.Linkname, rel)
			got.Files++
		default:
			return got, fmt.Errorf("%w: entry %q is of a kind not written here (%c)", ErrNotArchive, hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			return got, fmt.Errorf("take in %s: %w", hdr.Name, err)
		}
		if !hdr.ModTime.IsZero() && hdr.Typeflag != tar.TypeSymlink {
			_ = root.Chtimes(rel, hdr.ModTime, hdr.ModTime)
		}
	}
}

func writeFileIn(root *os.Root, rel string, mode fs.FileMode, r io.Reader, size int64) error {
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	n, err := copySparse(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = fmt.Errorf("%w: %d of %d bytes", ErrTruncated, n, size)
	}
	if err != nil && !errors.Is(err, ErrTruncated) && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrChecksum)) {
		err = fmt.Errorf("%w: %v", ErrTruncated, err)
	}
	return err
}

// MovedFromFile, in a person's folder, names their vault folder on the
// server their state came from, until the server here has moved what the
// CLI keeps by that path (MovedFrom, Settled).
const MovedFromFile = "moved-from.json"

type movedFrom struct {
	VaultDir string `json:"vault_dir"`
}

// MovedFrom is the vault folder person had on the server their state
// was imported from, or "" when nothing is left to move.
func MovedFrom(stateDir, person string) (string, error) {
	b, err := os.ReadFile(File(stateDir, person, MovedFromFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var m movedFrom
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("%s: %w", File(stateDir, person, MovedFromFile), err)
	}
	return m.VaultDir, nil
}

// Settled forgets where person's state came from (MovedFrom).
func Settled(stateDir, person string) error {
	err := os.Remove(File(stateDir, person, MovedFromFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// MoveAside moves person's folder out of the persons (to a folder whose
// name is no person's, kept until removed by hand) once their archive is
// safely elsewhere: a server started again does not serve the old copy.
// It returns where the folder went.
func MoveAside(stateDir, person string) (string, error) {
	if err := vault.CheckPerson(person); err != nil {
		return "", err
	}
	dest := filepath.Join(stateDir, personsDir, fmt.Sprintf(".exported-%s-%s", person, time.Now().UTC().Format("20060102T150405Z")))
	if err := os.Rename(Dir(stateDir, person), dest); err != nil {
		return "", fmt.Errorf("move %s's exported folder aside: %w", person, err)
	}
	return dest, nil
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// copySparse copies r to f, skipping blocks of zeros instead of writing
// them: a file the sandbox made sparse (no disk where it was written, its
// zeros compressed a thousandfold in the archive) takes no more disk here
// than there.
func copySparse(f *os.File, r io.Reader) (int64, error) {
	buf := make([]byte, 64<<10)
	var n int64
	hole := false
	for {
		k, err := r.Read(buf)
		if k > 0 {
			block := buf[:k]
			if allZero(block) {
				_, serr := f.Seek(int64(k), io.SeekCurrent)
				hole = true
				if serr != nil {
					return n, serr
				}
			} else {
				if _, werr := f.Write(block); werr != nil {
					return n, werr
				}
				hole = false
			}
			n += int64(k)
		}
		if errors.Is(err, io.EOF) {
			err = nil
			if hole {
				// A file that ends in a hole gets its length.
				err = f.Truncate(n)
			}
			return n, err
		}
		if err != nil {
			return n, err
		}
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
