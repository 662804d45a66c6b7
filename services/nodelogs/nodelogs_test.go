package nodelogs

import "testing"

func TestMessages(t *testing.T) {
	cri := []byte("2026-11-29T20:00:00.000000001Z stdout F hello\n" +
		"2026-11-29T20:00:00.000000002Z stderr P par\n" +
		"2026-11-29T20:00:00.000000003Z stderr F tial\n" +
		"garbage\n")
	if got, want := string(Messages(cri)), "hello\npartial\n"; got != want {
		t.Fatalf("Messages = %q, want %q", got, want)
	}
}
