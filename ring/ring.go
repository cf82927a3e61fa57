// Package ring tells which server HAProxy sends a person to: the
// consistent hash of `balance hdr(X-Notes-Person)` with `hash-type
// consistent` (the sdbm hash of the header's value, then the avalanche
// hash that consistent hashing applies by default), over
// the servers of the backend in an HAProxy configuration. It is
// HAProxy's placement computed offline, so that the persons whose server
// changes when a server is added or removed are known before the change:
// each server of weight w stands at 16·w points of a 32-bit circle, at
// the full avalanche hash of id·4096 + i (id its numeric id, the `id`
// keyword or its place among the backend's servers, from 1), and a key
// goes to the server of the point nearest its hash, the earlier point
// when both are as near. HAProxy's own code, not a standard, defines it:
// the cluster test checks it against the haproxy it runs.
package ring

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Header is the request header HAProxy hashes: the person.
const Header = "X-Notes-Person"

// Server is one server of the backend.
type Server struct {
	Name string
	// ID is HAProxy's numeric id of the server (puid).
	ID int
	// Weight is its weight (default 1); a server of weight 0, a
	// disabled one and a backup one take no persons.
	Weight   int
	Disabled bool
	Backup   bool
}

// Ring is the servers' points on the circle.
type Ring struct {
	points []point
}

type point struct {
	key    uint32
	server string
}

// weightScale is HAProxy's BE_WEIGHT_SCALE: points per unit of weight.
const weightScale = 16

// idRange is HAProxy's SRV_EWGHT_RANGE (SRV_UWGHT_RANGE 256 times
// BE_WEIGHT_SCALE): the span of keys each server's points are made from.
const idRange = 256 * weightScale

// New places servers on the circle; those that take no persons are left
// out.
func New(servers []Server) (*Ring, error) {
	r := &Ring{}
	for _, s := range servers {
		if s.Disabled || s.Backup || s.Weight <= 0 {
			continue
		}
		if s.ID <= 0 {
			return nil, fmt.Errorf("server %s has no id", s.Name)
		}
		for i := 0; i < s.Weight*weightScale; i++ {
			r.points = append(r.points, point{key: avalanche(uint32(s.ID)*idRange + uint32(i)), server: s.Name})
		}
	}
	if len(r.points) == 0 {
		return nil, errors.New("no server takes persons")
	}
	sortPoints(r)
	return r, nil
}

// sortPoints orders the points by key; points of the same key keep the
// order they were made in, as HAProxy's tree keeps duplicates.
func sortPoints(r *Ring) {
	slices.SortStableFunc(r.points, func(a, b point) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
}

// Server is the server person's requests go to.
func (r *Ring) Server(person string) string { return r.serverOf(avalanche(sdbm(person))) }

// serverOf is the server of the point nearest h.
func (r *Ring) serverOf(h uint32) string {
	i, _ := slices.BinarySearchFunc(r.points, h, func(p point, h uint32) int {
		switch {
		case p.key < h:
			return -1
		case p.key > h:
			return 1
		}
		return 0
	})
	next := r.points[i%len(r.points)]
	prev := r.points[(i+len(r.points)-1)%len(r.points)]
	if next.server == prev.server {
		return next.server
	}
	// Distances on the circle, in 32-bit arithmetic as HAProxy's.
	if h-prev.key <= next.key-h {
		return prev.server
	}
	return next.server
}

// sdbm is HAProxy's default hash function of a key.
func sdbm(s string) uint32 {
	var h uint32
	for i := 0; i < len(s); i++ {
		h = uint32(s[i]) + (h << 6) + (h << 16) - h
	}
	return h
}

// avalanche is HAProxy's full_hash: Bob Jenkins' full avalanche integer
// hash, times a prime. It places the servers' points and, with
// consistent hashing, mixes the key's hash.
func avalanche(a uint32) uint32 {
	a = (a + 0x7ed55d16) + (a << 12)
	a = (a ^ 0xc761c23c) ^ (a >> 19)
	a = (a + 0x165667b1) + (a << 5)
	a = (a + 0xd3a2646c) ^ (a << 9)
	a = (a + 0xfd7046c5) + (a << 3)
	a = (a ^ 0xb55a4f09) ^ (a >> 16)
	// HAProxy spreads the values over the tree with a prime near 3/4
	// of 2³².
	return a * 3221225473
}

// ReadConfig reads the servers of the backend of an HAProxy
// configuration that balances on the person's header (`balance
// hdr(X-Notes-Person)`). Servers without an `id` are numbered as
// HAProxy numbers them: a count starts at 1 and moves one on at each
// server in the order written; a server without an id first moves it on
// to a number no server has, and takes that.
func ReadConfig(path string) ([]Server, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	servers, err := parseConfig(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return servers, nil
}

func parseConfig(r io.Reader) ([]Server, error) {
	type backend struct {
		name    string
		byHdr   bool
		servers []Server
	}
	var all []*backend
	var cur *backend
	lines := bufio.NewScanner(r)
	for n := 1; lines.Scan(); n++ {
		line, _, _ := strings.Cut(lines.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "backend", "listen":
			cur = &backend{}
			if len(f) > 1 {
				cur.name = f[1]
			}
			all = append(all, cur)
		case "frontend", "defaults", "global", "peers", "resolvers", "userlist", "program", "cache", "mailers", "ring", "http-errors":
			cur = nil
		case "balance":
			if cur != nil && len(f) > 1 && strings.EqualFold(f[1], "hdr("+Header+")") {
				cur.byHdr = true
			}
		case "server":
			if cur == nil {
				continue
			}
			if len(f) < 3 {
				return nil, fmt.Errorf("line %d: a server line without name and address", n)
			}
			s := Server{Name: f[1], Weight: 1}
			for i := 3; i < len(f); i++ {
				switch f[i] {
				case "disabled":
					s.Disabled = true
				case "backup":
					s.Backup = true
				case "id", "weight":
					if i+1 >= len(f) {
						return nil, fmt.Errorf("line %d: %s without a value", n, f[i])
					}
					v, err := strconv.Atoi(f[i+1])
					if err != nil || v < 0 {
						return nil, fmt.Errorf("line %d: %s %q", n, f[i], f[i+1])
					}
					if f[i] == "id" {
						s.ID = v
					} else {
						s.Weight = v
					}
					i++
				}
			}
			cur.servers = append(cur.servers, s)
		}
	}
	if err := lines.Err(); err != nil {
		return nil, err
	}
	var found *backend
	for _, b := range all {
		if b.byHdr {
			if found != nil {
				return nil, fmt.Errorf("two backends balance on %s (%s, %s)", Header, found.name, b.name)
			}
			found = b
		}
	}
	if found == nil {
		return nil, fmt.Errorf("no backend balances on hdr(%s)", Header)
	}
	used := map[int]bool{}
	for _, s := range found.servers {
		used[s.ID] = true
	}
	// HAProxy's count moves on at every server, numbered by hand or not.
	next := 1
	for i := range found.servers {
		if found.servers[i].ID == 0 {
			for used[next] {
				next++
			}
			found.servers[i].ID = next
			used[next] = true
		}
		next++
	}
	return found.servers, nil
}
