package standin

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build compiles the stand-in binary into a directory of the test's own and
// returns its path. It fails the test if the Go toolchain is missing or the
// build fails: the load tests never run without their CLI.
func Build(tb testing.TB) string {
	tb.Helper()
	root := moduleRoot(tb)
	goTool := "go"
	if g := os.Getenv("GOROOT"); g != "" {
		if p := filepath.Join(g, "bin", "go"); fileExists(p) {
			goTool = p
		}
	}
	if goTool == "go" {
		p, err := exec.LookPath("go")
		if err != nil {
			tb.Fatalf("standin: no go toolchain to build the stand-in CLI: %v", err)
		}
		goTool = p
	}
	bin := filepath.Join(tb.TempDir(), "standin")
	cmd := exec.Command(goTool, "build", "-o", bin, "./internal/standin/cmd/standin")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("standin: build: %v\n%s", err, out)
	}
	return bin
}

func moduleRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for !fileExists(filepath.Join(dir, "go.mod")) {
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("standin: no go.mod above the test's directory")
		}
		dir = parent
	}
	return dir
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
