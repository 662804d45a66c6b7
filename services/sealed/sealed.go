// Package sealed keeps bearer tokens out of the event stream in clear: a
// token that travels on the bus is sealed to the api stage's public key
// with a NaCl anonymous sealed box (X25519, XSalsa20-Poly1305), so only
// the api stage, which holds the private key, can open it. Every identity
// that may read the stream (runners recover messages by sequence, the
// dead-letter records copy them) sees ciphertext.
//
//	key, _ := sealed.LoadOrCreate(path)          // the api stage, at start
//	s, _ := sealed.Seal(key.Public, token)         // a client, or the api stage republishing
//	token, err := key.Open(s)                      // the api stage, handling PodRequested
//
// An Opener remembers the tokens it opened, so a client's token, sealed
// once and sent with every request, costs one X25519 multiplication in
// all rather than one per request.
package sealed

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/nacl/box"
)

// Prefix starts every sealed token, so a sealed token is never mistaken
// for a bearer token in clear.
const Prefix = "sealed.v1."

// Errors.
var (
	// ErrNotSealed: a token in clear where a sealed one is required.
	ErrNotSealed = errors.New("sealed: token is not sealed")
	// ErrOpen: a sealed token that this key cannot open.
	ErrOpen = errors.New("sealed: cannot open token")
)

// PublicKey is the api stage's public key, given to whoever seals.
type PublicKey [32]byte

// String is the key in hex (what client configurations hold).
func (p PublicKey) String() string { return hex.EncodeToString(p[:]) }

// ParsePublicKey parses PublicKey.String.
func ParsePublicKey(s string) (PublicKey, error) {
	var p PublicKey
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(p) {
		return p, fmt.Errorf("sealed: public key %q: want %d hex bytes", s, len(p))
	}
	copy(p[:], b)
	return p, nil
}

// Key is the api stage's key pair.
type Key struct {
	Public  PublicKey
	private [32]byte
}

// Generate returns a fresh key pair.
func Generate() (*Key, error) {
	pub, priv, err := box.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return &Key{Public: *pub, private: *priv}, nil
}

// LoadOrCreate reads the key pair at path (the private key in hex),
// creating it, readable by its owner only, if it does not exist.
func LoadOrCreate(path string) (*Key, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		k, err := Generate()
		if err != nil {
			return nil, err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(hex.EncodeToString(k.private[:])+"\n"), 0o600); err != nil {
			return nil, err
		}
		return k, os.Rename(tmp, path)
	}
	if err != nil {
		return nil, err
	}
	priv, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(priv) != 32 {
		return nil, fmt.Errorf("sealed: key file %q: want 32 hex bytes", path)
	}
	k := &Key{}
	copy(k.private[:], priv)
	pub, err := publicOf(&k.private)
	if err != nil {
		return nil, err
	}
	k.Public = pub
	return k, nil
}

// Seal seals token to pub. An empty token stays empty (no credential).
func Seal(pub PublicKey, token string) (string, error) {
	if token == "" {
		return "", nil
	}
	p := [32]byte(pub)
	out, err := box.SealAnonymous(nil, []byte(token), &p, rand.Reader)
	if err != nil {
		return "", err
	}
	return Prefix + base64.RawURLEncoding.EncodeToString(out), nil
}

// IsSealed reports whether s is a sealed token.
func IsSealed(s string) bool { return strings.HasPrefix(s, Prefix) }

// Open opens a sealed token; "" stays "". A token in clear is
// ErrNotSealed, one sealed to another key (or tampered with) ErrOpen.
func (k *Key) Open(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok {
		return "", ErrNotSealed
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return "", ErrOpen
	}
	pub := [32]byte(k.Public)
	out, ok := box.OpenAnonymous(nil, b, &pub, &k.private)
	if !ok {
		return "", ErrOpen
	}
	return string(out), nil
}
