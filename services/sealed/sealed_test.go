package sealed

import (
	"encoding/base64"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seal.key")
	k, err := LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreate(path)
	if err != nil || again.Public != k.Public {
		t.Fatalf("reloaded key differs: %v", err)
	}
	pub, err := ParsePublicKey(k.Public.String())
	if err != nil || pub != k.Public {
		t.Fatalf("public key round trip: %v", err)
	}
	const token = "admin-token-1234"
	s, err := Seal(pub, token)
	if err != nil {
		t.Fatal(err)
	}
	if !IsSealed(s) || strings.Contains(s, token) {
		t.Fatalf("sealed token %q shows the token", s)
	}
	if got, err := again.Open(s); err != nil || got != token {
		t.Fatalf("Open = %q, %v", got, err)
	}
	other, _ := Generate()
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s, Prefix))
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 1 // one bit of the box (new text for its last characters could decode as before)
	tampered := Prefix + base64.RawURLEncoding.EncodeToString(raw)
	for _, tt := range []struct {
		name string
		key  *Key
		in   string
		want error
	}{
		{"in clear", k, token, ErrNotSealed},
		{"another key", other, s, ErrOpen},
		{"tampered", k, tampered, ErrOpen},
		{"not base64", k, Prefix + "!!", ErrOpen},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.key.Open(tt.in); !errors.Is(err, tt.want) {
				t.Errorf("Open = %v, want %v", err, tt.want)
			}
		})
	}
	if s, err := Seal(pub, ""); s != "" || err != nil {
		t.Errorf("Seal of no token = %q, %v", s, err)
	}
}
