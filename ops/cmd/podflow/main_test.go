package main

import (
	"bytes"
	"testing"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/services/objects"
)

// TestNotFoundError: `get pod x` of a missing pod prints kubectl's line,
// without "error: ", and exits 1.
func TestNotFoundError(t *testing.T) {
	for _, tc := range []struct {
		kind objects.Kind
		want string
	}{
		{objects.Pods, `Error from server (NotFound): pods "x" not found`},
		{objects.EndpointSlices, `Error from server (NotFound): endpointslices.discovery.k8s.io "x" not found`},
	} {
		t.Run(tc.kind.Name, func(t *testing.T) {
			err := client.NotFound(tc.kind, "x")
			var b bytes.Buffer
			printError(&b, err)
			if b.String() != tc.want+"\n" || exitCode(err) != 1 {
				t.Fatalf("got %q exit %d, want %q exit 1", b.String(), exitCode(err), tc.want)
			}
		})
	}
	var b bytes.Buffer
	printError(&b, errString("boom"))
	if b.String() != "error: boom\n" {
		t.Fatalf("other errors: %q", b.String())
	}
}

type errString string

func (e errString) Error() string { return string(e) }
