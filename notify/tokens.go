package notify

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"
)

// Errors of redeeming an action token.
var (
	// ErrInvalidToken is a token the server did not sign as it is (made
	// up, tampered with) or that names another person than the one who
	// presents it: it never decides anything.
	ErrInvalidToken = errors.New("not a valid action")
	// ErrTokenGone is a token the server signed that no longer decides
	// anything: used already (it or another action of the same
	// request), its request answered some other way or ended, or past
	// its time.
	ErrTokenGone = errors.New("this action is no longer valid")
)

// Decision is what an action decides.
type Decision struct {
	// Kind is the request's: question, permission or draft.
	Kind string
	// Allow answers a permission or draft.
	Allow bool
	// Question and Label answer a question: the option chosen.
	Question string
	Label    string
}

// Claim is what a redeemed action token says: whose request, in which
// session, and the decision. The token is spent by then.
type Claim struct {
	Person    string
	SessionID string
	RequestID string
	Decision  Decision
}

// tokenBody is what a token carries, signed: short keys keep the URL
// short. N is the token's own random id; D the index of its decision
// among its request's.
type tokenBody struct {
	P string `json:"p"`
	S string `json:"s"`
	R string `json:"r"`
	D int    `json:"d"`
	N string `json:"n"`
	E int64  `json:"e"`
}

// liveToken is a token not spent yet.
type liveToken struct {
	body  tokenBody
	claim Claim
}

// maxLiveTokens bounds the tokens kept: the oldest beyond it are dropped
// (their requests long gone in all but a flood).
const maxLiveTokens = 10000

// tokens issues action tokens and redeems each once. A token is
// base64url(body) "." base64url(HMAC-SHA256(key, body)): unguessable (128
// random bits of its own, and the signature) and bound to person,
// session, request and decision. Tokens live in memory only: a restart,
// which ends every request, ends them too.
type tokens struct {
	key []byte
	mu  sync.Mutex
	// live is every token not spent, by its id; byRequest their ids by
	// session and request.
	live      map[string]*liveToken
	byRequest map[string][]string
}

func newTokens() (*tokens, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return &tokens{key: key, live: map[string]*liveToken{}, byRequest: map[string][]string{}}, nil
}

func requestKey(session, request string) string { return session + "/" + request }

// issue returns a token for c, the index-th decision of its request,
// valid until exp; now prunes the tokens past their time when there are
// too many.
func (t *tokens) issue(c Claim, index int, now, exp time.Time) (string, error) {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	body := tokenBody{P: c.Person, S: c.SessionID, R: c.RequestID, D: index, N: base64.RawURLEncoding.EncodeToString(nonce), E: exp.Unix()}
	raw, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.live) >= maxLiveTokens {
		t.pruneLocked(now)
	}
	t.live[body.N] = &liveToken{body: body, claim: c}
	k := requestKey(c.SessionID, c.RequestID)
	t.byRequest[k] = append(t.byRequest[k], body.N)
	return base64.RawURLEncoding.EncodeToString(raw) + "." + base64.RawURLEncoding.EncodeToString(t.sign(raw)), nil
}

func (t *tokens) sign(raw []byte) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write(raw)
	return m.Sum(nil)
}

// redeem spends token, with every other token of its request, and
// returns its claim. person, when not empty, is who presents it (their
// credentials came with it): a token of someone else's is refused and
// stays valid. ErrInvalidToken or ErrTokenGone.
func (t *tokens) redeem(token, person string, now time.Time) (Claim, error) {
	enc, sig, ok := strings.Cut(token, ".")
	if !ok || len(token) > 1024 {
		return Claim{}, ErrInvalidToken
	}
	raw, err1 := base64.RawURLEncoding.DecodeString(enc)
	got, err2 := base64.RawURLEncoding.DecodeString(sig)
	if err1 != nil || err2 != nil || !hmac.Equal(got, t.sign(raw)) {
		return Claim{}, ErrInvalidToken
	}
	var body tokenBody
	if err := json.Unmarshal(raw, &body); err != nil {
		return Claim{}, ErrInvalidToken
	}
	if person != "" && person != body.P {
		return Claim{}, ErrInvalidToken
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	lt, ok := t.live[body.N]
	if !ok || lt.body != body {
		return Claim{}, ErrTokenGone
	}
	t.revokeLocked(body.S, body.R)
	if now.Unix() >= body.E {
		return Claim{}, ErrTokenGone
	}
	return lt.claim, nil
}

// revoke ends the tokens of a request; an empty request ends every token
// of the session.
func (t *tokens) revoke(session, request string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.revokeLocked(session, request)
}

func (t *tokens) revokeLocked(session, request string) {
	if request != "" {
		for _, n := range t.byRequest[requestKey(session, request)] {
			delete(t.live, n)
		}
		delete(t.byRequest, requestKey(session, request))
		return
	}
	for k, ns := range t.byRequest {
		if strings.HasPrefix(k, session+"/") {
			for _, n := range ns {
				delete(t.live, n)
			}
			delete(t.byRequest, k)
		}
	}
}

// pruneLocked drops the tokens past their time and, if that is not
// enough, the oldest, down to three quarters of the bound.
func (t *tokens) pruneLocked(now time.Time) {
	var all []*liveToken
	for _, lt := range t.live {
		if now.Unix() >= lt.body.E {
			t.revokeLocked(lt.body.S, lt.body.R)
			continue
		}
		all = append(all, lt)
	}
	if len(t.live) < maxLiveTokens*3/4 {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i].body.E < all[j].body.E })
	for _, lt := range all {
		if len(t.live) < maxLiveTokens*3/4 {
			return
		}
		t.revokeLocked(lt.body.S, lt.body.R)
	}
}
