package disruption

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/services/pipeline"
)

// TestScaleControllerRefusals: a pod controller of a kind without a scale
// subresource, or of no served kind, fails the budget's sync with
// kube's errors; one of a scalable kind the typed finders did not
// resolve (gone, another uid) is no controller, as kube's NotFound.
func TestScaleControllerRefusals(t *testing.T) {
	var dc Controller
	for _, tc := range []struct {
		apiVersion, kind string
		wantErr          string
	}{
		{"batch/v1", "Job", "jobs.batch does not implement the scale subresource"},
		{"example.com/v1", "Widget", `no matches for kind "Widget" in version "example.com/v1"`},
		{"apps/v1", "Deployment", ""},
		{"v1", "ReplicationController", ""},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			cs, err := dc.getScaleController(context.Background(), &metav1.OwnerReference{APIVersion: tc.apiVersion, Kind: tc.kind, Name: "x", UID: "u"}, "default")
			if cs != nil {
				t.Fatalf("got a scale %+v", cs)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig("r1").Validate(); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig("r1")
	cfg.Controller.Stage = pipeline.Deployment
	if err := cfg.Validate(); err == nil {
		t.Fatal("a Config of another stage validated")
	}
}
