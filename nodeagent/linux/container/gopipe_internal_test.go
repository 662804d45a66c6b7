package container

import (
	"os"
	"testing"
)

// TestAwaitGo: a child goes on only when its parent wrote the go byte; a
// pipe closed without it (the parent died before placing the child in its
// cgroups) is an error, so the child never runs unplaced.
func TestAwaitGo(t *testing.T) {
	for _, tc := range []struct {
		name   string
		send   bool
		wantOK bool
	}{{"placed", true, true}, {"parent died", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			if tc.send {
				err = sendGo(w)
			} else {
				err = w.Close() // as the kernel closes a killed parent's end
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := awaitGo(r); (err == nil) != tc.wantOK {
				t.Fatalf("awaitGo = %v, want ok %v", err, tc.wantOK)
			}
		})
	}
}
