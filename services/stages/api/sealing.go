package api

import (
	"errors"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/sealed"
	"github.com/podflow/podflow/services/stage"
)

// Bearer tokens on the bus. A token that enters the event stream (a
// PodRequested) is sealed to the api stage's key (Config.SealKey): a
// client publishing PodRequested seals it with the public key in its
// configuration, and the request-reply front door seals what it receives
// before it republishes the request on the stream. Only this stage opens
// it; the stream, its dead letters, and every identity that can read them
// see ciphertext. Without a SealKey, tokens travel in clear. A client
// seals its token once and sends it with every request, so the stage
// remembers the tokens it opened (sealed.Opener): one X25519 per client
// token, not one per request.

// sealForStream seals token for the stream (unchanged without a key, or
// when it is sealed already).
func (s *Stage) sealForStream(token string) (string, error) {
	if s.cfg.SealKey == nil || sealed.IsSealed(token) {
		return token, nil
	}
	return sealed.Seal(s.cfg.SealKey.Public, token)
}

// openFromStream opens a PodRequested's token. With a SealKey a token in
// clear is refused: it has been in the stream, readable by others.
func (s *Stage) openFromStream(token string) (string, *corev1.Status) {
	if s.cfg.SealKey == nil {
		if sealed.IsSealed(token) {
			return "", unauthorized("the api stage has no key to open sealed tokens")
		}
		return token, nil
	}
	s.openerOnce.Do(func() { s.opener = sealed.NewOpener(s.cfg.SealKey, sealed.DefaultOpenerSize) })
	out, err := s.opener.Open(token)
	switch {
	case errors.Is(err, sealed.ErrNotSealed):
		return "", unauthorized("a bearer token on the bus must be sealed to the api stage's key")
	case err != nil:
		return "", unauthorized("the sealed bearer token does not open with the api stage's key")
	}
	return out, nil
}

// openRequest opens the token of a request-reply that has not been in the
// stream: sealed (as clients send it) or in clear (core NATS request-reply
// is not stored).
func (s *Stage) openRequest(token string) (string, *corev1.Status) {
	if s.cfg.SealKey != nil && !sealed.IsSealed(token) {
		return token, nil
	}
	return s.openFromStream(token)
}

func unauthorized(msg string) *corev1.Status {
	return stage.Failure(401, eventsv1.ReasonUnauthorized, "", "", "%s", msg)
}
