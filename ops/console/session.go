package console

import (
	"crypto/rand"
	"encoding/base64"
	"sync"
	"time"
)

// Console sessions. The login cookie holds a random session id, never the
// token: the server keeps the session (the token it was opened with, and
// when it expires), logout revokes it, and a session expires SessionTTL
// after login. A session also ends when its token leaves the token file.

// DefaultSessionTTL is how long a console session lasts.
const DefaultSessionTTL = 8 * time.Hour

// maxSessions bounds the sessions kept; past it, logging in evicts the
// one that expires first.
const maxSessions = 1024

type session struct {
	token   string
	expires time.Time
}

// sessions is the server-side session store.
type sessions struct {
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex
	byID map[string]session
}

func newSessions(ttl time.Duration) *sessions {
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	return &sessions{ttl: ttl, now: time.Now, byID: map[string]session{}}
}

// open starts a session for token and returns its id.
func (s *sessions) open(token string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(b[:])
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.byID {
		if !now.Before(v.expires) {
			delete(s.byID, k)
		}
	}
	if len(s.byID) >= maxSessions {
		first := ""
		for k, v := range s.byID {
			if first == "" || v.expires.Before(s.byID[first].expires) {
				first = k
			}
		}
		delete(s.byID, first)
	}
	s.byID[id] = session{token: token, expires: now.Add(s.ttl)}
	return id, nil
}

// token returns the token of a live session ("" for none: unknown,
// revoked or expired).
func (s *sessions) token(id string) string {
	if id == "" {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.byID[id]
	if !ok {
		return ""
	}
	if !s.now().Before(v.expires) {
		delete(s.byID, id)
		return ""
	}
	return v.token
}

// revoke ends a session.
func (s *sessions) revoke(id string) {
	s.mu.Lock()
	delete(s.byID, id)
	s.mu.Unlock()
}
