package podrules

import (
	"testing"

	"github.com/podflow/podflow/proto/corev1"
)

// TestDefaultPullPolicy pins pkg/apis/core/v1/defaults.go
// SetDefaults_Container: Always for the tag "latest" (explicit, or implied
// by neither tag nor digest), IfNotPresent otherwise.
func TestDefaultPullPolicy(t *testing.T) {
	tests := []struct{ given, want string }{
		{"nginx", PullAlways},
		{"nginx:latest", PullAlways},
		{"nginx:1.27", PullIfNotPresent},
		{"registry.local:5000/team/nginx", PullAlways},
		{"registry.local:5000/team/nginx:1.0", PullIfNotPresent},
		{"registry.local:5000/team/nginx:latest", PullAlways},
		{"registry:5000/nginx", PullAlways},
		{"registry:5000/nginx:1.27", PullIfNotPresent},
		{"registry:5000/nginx@sha256:abcd", PullIfNotPresent},
		{"nginx@sha256:abcd", PullIfNotPresent},
		{"nginx:1.27@sha256:abcd", PullIfNotPresent},
		{"nginx:latest@sha256:abcd", PullAlways},
	}
	for _, tc := range tests {
		t.Run(tc.given, func(t *testing.T) {
			if got := DefaultPullPolicy(tc.given); got != tc.want {
				t.Errorf("DefaultPullPolicy(%q) = %q, want %q", tc.given, got, tc.want)
			}
		})
	}
}

// TestPullPolicyDigestWithLatestTag is the regression test of the
// divergence between the former copies: admission defaulted
// "nginx:latest@sha256:…" to Always while the node agent, reading the text
// after the last ':' (the digest), pulled it IfNotPresent. Kubernetes'
// ParseImageName keeps the tag "latest" beside the digest: Always, for a
// container the agent sees without a policy too.
func TestPullPolicyDigestWithLatestTag(t *testing.T) {
	const image = "nginx:latest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if got := DefaultPullPolicy(image); got != PullAlways {
		t.Errorf("DefaultPullPolicy(%q) = %q, want Always", image, got)
	}
	if got := PullPolicy(&corev1.Container{Image: image}); got != PullAlways {
		t.Errorf("PullPolicy(%q) = %q, want Always", image, got)
	}
}

func TestPullPolicy(t *testing.T) {
	tests := []struct{ image, policy, want string }{
		{"nginx", "", PullAlways},
		{"nginx:1.27", "", PullIfNotPresent},
		{"nginx:latest", PullNever, PullNever},
		{"nginx:1.27", PullAlways, PullAlways},
	}
	for _, tc := range tests {
		if got := PullPolicy(&corev1.Container{Image: tc.image, ImagePullPolicy: tc.policy}); got != tc.want {
			t.Errorf("PullPolicy(%q, %q) = %q, want %q", tc.image, tc.policy, got, tc.want)
		}
	}
}
