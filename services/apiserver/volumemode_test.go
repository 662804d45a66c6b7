package apiserver_test

import (
	"testing"
)

// TestVolumeDefaultModeHTTPS: a configMap, secret, downwardAPI or
// projected volume without a defaultMode is stored with Kubernetes'
// default, 0644 (420), a secret's too, so a GET shows it; a mode given is
// kept.
func TestVolumeDefaultModeHTTPS(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	pods := s.url + "/api/v1/namespaces/default/pods"
	body := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"modes"},"spec":{"containers":[{"name":"c","image":"nginx"}],
"volumes":[{"name":"cm","configMap":{"name":"cm"}},{"name":"sec","secret":{"secretName":"s"}},
{"name":"dapi","downwardAPI":{"items":[{"path":"name","fieldRef":{"fieldPath":"metadata.name"}}]}},
{"name":"proj","projected":{"sources":[{"secret":{"name":"s"}}]}},
{"name":"own","secret":{"secretName":"s","defaultMode":256}}]}}`
	if code, out, _ := do(t, admin, "POST", pods, "application/json", body); code != 201 {
		t.Fatalf("%d %v", code, out)
	}
	code, out, _ := do(t, admin, "GET", pods+"/modes", "", "")
	if code != 200 {
		t.Fatalf("GET %d %v", code, out)
	}
	vols, _ := path(out, "spec.volumes").([]any)
	want := map[string]struct {
		kind string
		mode float64
	}{"cm": {"configMap", 420}, "sec": {"secret", 420}, "dapi": {"downwardAPI", 420}, "proj": {"projected", 420}, "own": {"secret", 256}}
	if len(vols) != len(want) {
		t.Fatalf("volumes %v", vols)
	}
	for _, v := range vols {
		v := v.(map[string]any)
		name, _ := v["name"].(string)
		w := want[name]
		if got := path(v, w.kind+".defaultMode"); got != w.mode {
			t.Errorf("volume %s: %s.defaultMode %v, want %v", name, w.kind, got, w.mode)
		}
	}
}
