package linux

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux/image"
	"github.com/podflow/podflow/nodeagent/linux/network"
)

// TestAgentErrorKeepsWireCodes: the image and network libraries' own
// sentinels reach the agent with the codes (Kubernetes reasons) and the
// messages they carried when the libraries built *nodeagent.Error
// themselves.
func TestAgentErrorKeepsWireCodes(t *testing.T) {
	ctx := context.Background()
	s, err := image.NewStore(image.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	_, neverErr := s.Pull(ctx, "app:1", image.PullNever)
	_, policyErr := s.Pull(ctx, "app:1", "Sometimes")
	rootfsErr := s.Rootfs(ctx, "notpulled:1", filepath.Join(t.TempDir(), "r"))
	netErr := fmt.Errorf("wrapped: %w", errors.Join(network.ErrSandbox, errors.New("bridge \"pf0\": operation not permitted")))
	plain := errors.New("plain")
	tests := []struct {
		name     string
		given    error
		sentinel error
		code     nodeagent.Code
		text     string // the whole message, as before
		cause    error
	}{
		{"never pull", neverErr, nodeagent.ErrImageNeverPull, nodeagent.CodeImageNeverPull,
			`ErrImageNeverPull: image "app:1" is not present with pull policy of Never: image: image not present`, image.ErrNotPresent},
		{"pull", policyErr, nodeagent.ErrImagePull, nodeagent.CodeImagePull,
			`ErrImagePull: image: invalid pull policy "Sometimes"`, image.ErrInvalidPolicy},
		{"rootfs", rootfsErr, nodeagent.ErrCreateContainer, nodeagent.CodeCreateContainer, "", image.ErrNotPresent},
		{"sandbox", netErr, nodeagent.ErrSandbox, nodeagent.CodeSandbox, "FailedCreatePodSandBox: " + netErr.Error(), network.ErrSandbox},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := agentError(tc.given)
			if !errors.Is(got, tc.sentinel) || nodeagent.CodeOf(got, "") != tc.code {
				t.Fatalf("agentError(%v) = %v (code %q), want code %q", tc.given, got, nodeagent.CodeOf(got, ""), tc.code)
			}
			if !errors.Is(got, tc.cause) {
				t.Errorf("agentError(%v) lost its cause %v", tc.given, tc.cause)
			}
			if want := string(tc.code) + ": " + tc.given.Error(); got.Error() != want {
				t.Errorf("message = %q, want %q", got.Error(), want)
			}
			if tc.text != "" && got.Error() != tc.text {
				t.Errorf("message = %q, want %q", got.Error(), tc.text)
			}
		})
	}
	if agentError(nil) != nil || agentError(plain) != plain {
		t.Error("agentError changed an error without a library class")
	}
}
