package main

import (
	"net/http"
	"os"
	"path"
	"strings"
)

// clientFiles serves only the web client itself from its folder: the page,
// its stylesheet, its scripts, the app's manifest, icons and service
// worker, and the vendored terminal emulator and its fonts. The folder also holds the client's tests
// and node_modules, which are nobody's business; and no folder is listed.
type clientFiles struct{ dir http.FileSystem }

func (c clientFiles) Open(name string) (http.File, error) {
	name = path.Clean("/" + name)
	allowed := name == "/" || name == "/index.html" || name == "/style.css" || name == "/manifest.json" || name == "/sw.js" ||
		(strings.HasPrefix(name, "/icons/") && strings.HasSuffix(name, ".png")) ||
		(strings.HasPrefix(name, "/js/") && strings.HasSuffix(name, ".js")) ||
		(strings.HasPrefix(name, "/vendor/xterm/") && (strings.HasSuffix(name, ".mjs") || strings.HasSuffix(name, ".css") || strings.Contains(name, "LICENSE"))) ||
		(strings.HasPrefix(name, "/vendor/fonts/") && (strings.HasSuffix(name, ".woff2") || strings.HasSuffix(name, ".css") || strings.Contains(name, "LICENSE")))
	if !allowed {
		return nil, os.ErrNotExist
	}
	f, err := c.dir.Open(name)
	if err != nil {
		return nil, err
	}
	if name == "/" {
		return f, nil // the index page, served by http.FileServer
	}
	if st, err := f.Stat(); err != nil || st.IsDir() {
		f.Close()
		return nil, os.ErrNotExist
	}
	return f, nil
}
