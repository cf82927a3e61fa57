// Package web holds the browser client: the page, its stylesheet and its
// scripts, compiled into the server binary so that one binary is the whole
// product. It owns no behaviour of its own; the server decides where to
// serve it. Its tests and node_modules are not part of it.
package web

import (
	"embed"
	"io/fs"
)

//go:embed index.html style.css manifest.json sw.js icons/*.png js/*.js vendor/xterm/*.mjs vendor/xterm/*.css vendor/xterm/LICENSE* vendor/fonts/*.woff2 vendor/fonts/*.css vendor/fonts/LICENSE*
var files embed.FS

// Files is the client as served: index.html, style.css, js/*.js, the
// installable app's manifest.json, icons and service worker (sw.js), the
// vendored xterm.js (vendor/xterm) and the terminal's fonts
// (vendor/fonts).
func Files() fs.FS { return files }
