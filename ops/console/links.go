package console

import (
	"crypto/rand"
	"encoding/base64"
	"sync"
	"time"
)

// LoginLinks are one-time login links, as Jupyter prints at start: a
// random code in the URL (/login?code=…) that opens a session once, for
// the token it was made for, within its TTL; used or expired, it is
// refused. The code never reaches a cookie: the session's id does.
type LoginLinks struct {
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	codes map[string]linkCode
}

type linkCode struct {
	token   string
	expires time.Time
}

// DefaultLinkTTL is how long a login link stays valid.
const DefaultLinkTTL = 24 * time.Hour

// maxLinks bounds the codes kept; past it, the oldest goes.
const maxLinks = 64

// NewLoginLinks returns an empty set of links valid for ttl (0:
// DefaultLinkTTL).
func NewLoginLinks(ttl time.Duration) *LoginLinks {
	if ttl <= 0 {
		ttl = DefaultLinkTTL
	}
	return &LoginLinks{ttl: ttl, now: time.Now, codes: map[string]linkCode{}}
}

// New makes a code that logs in once as token; the link is
// /login?code=CODE on the console's address.
func (l *LoginLinks) New(token string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	code := base64.RawURLEncoding.EncodeToString(b[:])
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.codes) >= maxLinks {
		first := ""
		for k, v := range l.codes {
			if first == "" || v.expires.Before(l.codes[first].expires) {
				first = k
			}
		}
		delete(l.codes, first)
	}
	l.codes[code] = linkCode{token: token, expires: l.now().Add(l.ttl)}
	return code, nil
}

// use consumes code and returns its token ("" when unknown, used or
// expired).
func (l *LoginLinks) use(code string) string {
	if l == nil || code == "" {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.codes[code]
	delete(l.codes, code)
	if !ok || !l.now().Before(c.expires) {
		return ""
	}
	return c.token
}
