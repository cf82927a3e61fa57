package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/majorhq/major/auth"
)

// personList is a repeatable, comma-separated --person flag.
type personList []string

func (p *personList) String() string { return strings.Join(*p, ",") }

func (p *personList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*p = append(*p, s)
		}
	}
	return nil
}

const tokenUsage = `usage:
  major token add --auth-file FILE --person NAME [--person NAME ...] --name NAME
  major token list --auth-file FILE
  major token revoke --auth-file FILE NAME`

// token is `major token add|list|revoke`: the token file, changed under
// the same lock the running server uses, which picks the change up at
// its next request.
func token(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, tokenUsage)
		return errors.New("no token command")
	}
	if isHelp(args[0]) {
		// stderr is stdout here: the usage is the answer (helpOut).
		fmt.Fprintln(stderr, tokenUsage)
		return flag.ErrHelp
	}
	fs := flag.NewFlagSet("major token "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("auth-file", "", "the token file (MAJOR_AUTH_FILE)")
	var persons personList
	var name string
	if args[0] == "add" {
		fs.Var(&persons, "person", "a person the token acts as (repeat, or separate with commas)")
		fs.StringVar(&name, "name", "", `whose device or program the token is, e.g. "Pixel 8"`)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *file == "" {
		*file = getenv("MAJOR_AUTH_FILE")
	}
	if *file == "" {
		return errors.New("--auth-file (MAJOR_AUTH_FILE) is required")
	}
	switch args[0] {
	case "add":
		if fs.NArg() > 0 {
			return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
		}
		if name == "" || len(persons) == 0 {
			return errors.New("token add needs --name and at least one --person")
		}
		var tok string
		err := auth.Edit(*file, func(f *auth.File) error {
			var err error
			tok, err = f.Add(name, persons, time.Now())
			return err
		})
		if err != nil {
			return fmt.Errorf("add token: %w", err)
		}
		// The token is shown this once and never again: the file keeps
		// only its digest. Alone on the last line, for scripts.
		fmt.Fprintf(stdout, "Added token %q for %s. It is shown only now; the server accepts it at once:\n%s\n", name, persons.String(), tok)
	case "list":
		f, err := auth.ReadFile(*file)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NAME\tPERSONS\tCREATED\tLAST USED")
		for _, e := range f.Tokens {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", e.Name, strings.Join(e.Persons, ","), when(e.Created), when(e.LastUsed))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if f.Plain {
			fmt.Fprintln(stderr, "note: this file holds its tokens in plain text; the next change (add, revoke, or the server recording a use) rewrites it hashed")
		}
	case "revoke":
		if fs.NArg() != 1 {
			return errors.New("token revoke needs the token's name (see major token list)")
		}
		if err := auth.Edit(*file, func(f *auth.File) error { return f.Revoke(fs.Arg(0)) }); err != nil {
			return fmt.Errorf("revoke: %w", err)
		}
		fmt.Fprintf(stdout, "Revoked %q: the server refuses it from its next request on and closes its open streams.\n", fs.Arg(0))
	default:
		fmt.Fprintln(stderr, tokenUsage)
		return fmt.Errorf("no token command %q", args[0])
	}
	return nil
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}
