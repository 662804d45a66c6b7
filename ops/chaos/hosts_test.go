package chaos

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestHostsOptions: a --host-count run that cannot be made says why before it
// starts anything.
func TestHostsOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"two hosts", Options{Hosts: 2}, "--host-count 2: the run is of 3 hosts"},
		{"four hosts", Options{Hosts: 4}, "--host-count 4: the run is of 3 hosts"},
		{"with --config", Options{Hosts: 3, Config: "/x/config.json"}, "--host-count: chaos starts the hosts itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Run(context.Background(), &tc.o, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want %q", err, tc.want)
			}
		})
	}
}
