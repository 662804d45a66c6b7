package sealed

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestOpenerRemembersWhatOpened: a sealed token opened once is answered
// from memory (here, even after the Opener's key is swapped for another),
// a token it has not seen goes to the key, and a tampered copy of a
// remembered token is refused.
func TestOpenerRemembersWhatOpened(t *testing.T) {
	k, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	o := NewOpener(k, 4)
	s, err := Seal(k.Public, "tok-1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := o.Open(s); err != nil || got != "tok-1" {
		t.Fatalf("Open = %q, %v; want tok-1", got, err)
	}
	other, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	o.key = other // from now on only memory can open s
	if got, err := o.Open(s); err != nil || got != "tok-1" {
		t.Fatalf("Open of a remembered token = %q, %v; want tok-1 from memory", got, err)
	}
	s2, err := Seal(k.Public, "tok-2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Open(s2); !errors.Is(err, ErrOpen) {
		t.Fatalf("Open of an unseen token sealed to the old key: %v, want ErrOpen (it must go to the key)", err)
	}
	o.key = k
	// One bit of the box flipped. (Changing the text's last character
	// instead left it as it was when that was an A or a B, and may change
	// only padding bits, which the decoder ignores.)
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s, Prefix))
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 1
	tampered := Prefix + base64.RawURLEncoding.EncodeToString(raw)
	for i := range 2 {
		if _, err := o.Open(tampered); !errors.Is(err, ErrOpen) {
			t.Fatalf("Open of a tampered token (try %d): %v, want ErrOpen", i, err)
		}
	}
	if _, err := o.Open("tok-in-clear"); !errors.Is(err, ErrNotSealed) {
		t.Fatalf("Open of a token in clear: %v, want ErrNotSealed", err)
	}
	if got, err := o.Open(""); err != nil || got != "" || o.Len() != 1 {
		t.Fatalf("Open(\"\") = %q, %v (remembering %d); want \"\", nil, only tok-1 remembered", got, err, o.Len())
	}
}

// TestOpenerBounded: however many distinct tokens it opens, it remembers
// at most its size, and each still opens to its own token.
func TestOpenerBounded(t *testing.T) {
	k, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	o := NewOpener(k, 8)
	for i := range 50 {
		want := fmt.Sprintf("tok-%d", i)
		s, err := Seal(k.Public, want)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := o.Open(s); err != nil || got != want {
			t.Fatalf("Open = %q, %v; want %q", got, err, want)
		}
		if n := o.Len(); n > 8 {
			t.Fatalf("after %d tokens it remembers %d, want at most 8", i+1, n)
		}
	}
}
