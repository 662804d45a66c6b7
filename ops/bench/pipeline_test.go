package bench

import "testing"

// TestBenchPodTokenVolume: the bench's pods keep the default
// automountServiceAccountToken (unset: the ServiceAccount's, else true),
// and set it to false without a token volume.
func TestBenchPodTokenVolume(t *testing.T) {
	if v := benchPod(true).GetSpec().AutomountServiceAccountToken; v != nil {
		t.Errorf("with a token volume: automountServiceAccountToken %v, want unset", *v)
	}
	if v := benchPod(false).GetSpec().AutomountServiceAccountToken; v == nil || *v {
		t.Errorf("without a token volume: automountServiceAccountToken %v, want false", v)
	}
}
