package apiserver_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/services/apiserver"
)

func names(body map[string]any) []string {
	var out []string
	items, _ := body["items"].([]any)
	for _, it := range items {
		out = append(out, path(it.(map[string]any), "metadata.name").(string))
	}
	return out
}

func createConfigMaps(t *testing.T, s *system, ns string, n int, labels string) {
	t.Helper()
	admin := s.client(t, adminToken)
	for i := range n {
		code, body, _ := do(t, admin, "POST", s.url+"/api/v1/namespaces/"+ns+"/configmaps", "application/json",
			fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%02d","labels":%s}}`, i, labels))
		if code != 201 {
			t.Fatalf("create cm-%02d: %d %v", i, code, body)
		}
	}
}

// TestListPaging: limit and continue page through one snapshot (the first
// page's resourceVersion) while objects are written; the token is
// Kubernetes' base64 JSON {v, rv, start}; an expired snapshot gets 410
// Expired with a token to continue at the latest revision.
func TestListPaging(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{https: func(c *apiserver.Config) { c.ListSnapshotTTL, c.TooLargeResourceVersionWait = 2e9, 2e8 }})
	admin := s.client(t, adminToken)
	cms := s.url + "/api/v1/namespaces/default/configmaps"
	createConfigMaps(t, s, "default", 5, `{"app":"x"}`)

	code, body, _ := do(t, admin, "GET", cms+"?limit=2", "", "")
	if code != 200 || fmt.Sprint(names(body)) != "[cm-00 cm-01]" || path(body, "metadata.remainingItemCount") != 3.0 {
		t.Fatalf("first page: %d %v", code, body)
	}
	rv := path(body, "metadata.resourceVersion").(string)
	cont := path(body, "metadata.continue").(string)
	raw, err := base64.RawURLEncoding.DecodeString(cont)
	if err != nil {
		t.Fatalf("token %q: %v", cont, err)
	}
	var tok struct {
		V     string `json:"v"`
		RV    int64  `json:"rv"`
		Start string `json:"start"`
	}
	if err := json.Unmarshal(raw, &tok); err != nil || tok.V != "meta.k8s.io/v1" || strconv.FormatInt(tok.RV, 10) != rv || tok.Start != "cm-01\x00" {
		t.Fatalf("token %s: %+v %v", raw, tok, err)
	}

	// Writes after the first page are not seen by the next pages.
	code, _, _ = do(t, admin, "DELETE", cms+"/cm-03", "", "")
	if code != 200 {
		t.Fatalf("delete cm-03: %d", code)
	}
	code, _, _ = do(t, admin, "POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-99"}}`)
	if code != 201 {
		t.Fatalf("create cm-99: %d", code)
	}
	var all []string
	for cont != "" {
		code, body, _ = do(t, admin, "GET", cms+"?limit=2&continue="+url.QueryEscape(cont), "", "")
		if code != 200 || path(body, "metadata.resourceVersion") != rv {
			t.Fatalf("continue: %d %v", code, body)
		}
		all = append(all, names(body)...)
		cont, _ = path(body, "metadata.continue").(string)
	}
	if fmt.Sprint(all) != "[cm-02 cm-03 cm-04]" {
		t.Errorf("the continued pages = %v, want the first page's snapshot [cm-02 cm-03 cm-04]", all)
	}

	t.Run("table", func(t *testing.T) {
		code, body, _ := do(t, admin, "GET", cms+"?limit=1", "", "", "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		if code != 200 || body["kind"] != "Table" || len(body["rows"].([]any)) != 1 || path(body, "metadata.continue") == nil {
			t.Fatalf("table page: %d %v", code, body)
		}
	})

	t.Run("selectors apply to every page", func(t *testing.T) {
		code, body, _ := do(t, admin, "GET", cms+"?limit=10&labelSelector=app%3Dx", "", "")
		if code != 200 || fmt.Sprint(names(body)) != "[cm-00 cm-01 cm-02 cm-04]" || path(body, "metadata.continue") != nil {
			t.Fatalf("selected: %d %v", code, body)
		}
	})

	t.Run("resourceVersion", func(t *testing.T) {
		// latest is a paged list's revision: its snapshot is kept, so an
		// Exact list at it is served whatever the system writes meanwhile
		// (docs/kubernetes-api.md; the store keeps no older revisions, and
		// its masterlease is renewed every half second here).
		_, first, _ := do(t, admin, "GET", cms+"?limit=1", "", "")
		latest := path(first, "metadata.resourceVersion").(string)
		if path(first, "metadata.continue") == nil {
			t.Fatalf("a list of 1 has no continue: %v", first)
		}
		n, _ := strconv.ParseInt(latest, 10, 64)
		for _, c := range []struct {
			query string
			code  int
		}{
			{"resourceVersion=0", 200},
			{"resourceVersion=" + latest + "&resourceVersionMatch=NotOlderThan", 200},
			{"resourceVersion=" + latest + "&resourceVersionMatch=Exact", 200},
			{"resourceVersion=1&resourceVersionMatch=NotOlderThan", 200},
			{"resourceVersion=1&resourceVersionMatch=Exact", 410},
			{"resourceVersion=1&limit=2", 410}, // exact, as Kubernetes
			{"resourceVersion=" + strconv.FormatInt(n+1000, 10), 504},
			{"resourceVersionMatch=Exact", 400},
			{"resourceVersion=0&resourceVersionMatch=Exact", 400},
			{"resourceVersionMatch=Sometimes&resourceVersion=1", 400},
			{"resourceVersion=1&continue=" + base64.RawURLEncoding.EncodeToString([]byte(`{"v":"meta.k8s.io/v1","rv":5,"start":"x"}`)), 400},
			{"continue=bm9wZQ", 400},
			{"limit=-1", 400},
		} {
			code, body, _ := do(t, admin, "GET", cms+"?"+c.query, "", "")
			if code != c.code {
				t.Errorf("list ?%s: %d, want %d: %v", c.query, code, c.code, body)
			}
		}
		code, body, _ := do(t, admin, "GET", cms+"/cm-00?resourceVersion="+latest, "", "")
		if code != 200 || path(body, "metadata.name") != "cm-00" {
			t.Errorf("get not older than %s: %d %v", latest, code, body)
		}
		code, _, _ = do(t, admin, "GET", cms+"/cm-00?resourceVersion=0", "", "")
		if code != 200 {
			t.Errorf("get any: %d", code)
		}
		code, _, _ = do(t, admin, "GET", cms+"/cm-00?resourceVersion="+strconv.FormatInt(n+1000, 10), "", "")
		if code != 504 {
			t.Errorf("get from the future: %d, want 504", code)
		}
	})

	t.Run("expired continue", func(t *testing.T) {
		code, body, _ := do(t, admin, "GET", cms+"?limit=2", "", "")
		if code != 200 {
			t.Fatalf("first page: %d %v", code, body)
		}
		cont := path(body, "metadata.continue").(string)
		code, _, _ = do(t, admin, "POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-98"}}`)
		if code != 201 {
			t.Fatalf("create: %d", code)
		}
		time.Sleep(2500 * time.Millisecond) // past ListSnapshotTTL
		code, body, _ = do(t, admin, "GET", cms+"?limit=2&continue="+url.QueryEscape(cont), "", "")
		if code != 410 || body["reason"] != "Expired" || path(body, "metadata.continue") == nil {
			t.Fatalf("expired continue: %d %v", code, body)
		}
		var rest []string
		next := path(body, "metadata.continue").(string)
		for next != "" {
			code, body, _ = do(t, admin, "GET", cms+"?limit=2&continue="+url.QueryEscape(next), "", "")
			if code != 200 {
				t.Fatalf("inconsistent continue: %d %v", code, body)
			}
			rest = append(rest, names(body)...)
			next, _ = path(body, "metadata.continue").(string)
		}
		if fmt.Sprint(rest) != "[cm-02 cm-04 cm-98 cm-99]" {
			t.Errorf("the latest remainder = %v", rest)
		}
	})
}

// TestDeleteCollection: DELETE on a collection deletes what its selectors
// match (kubectl delete -l, client-go DeleteCollection) and lists it.
func TestDeleteCollection(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	cms := s.url + "/api/v1/namespaces/default/configmaps"
	createConfigMaps(t, s, "default", 3, `{"app":"x"}`)
	code, _, _ := do(t, admin, "POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"keep","labels":{"app":"y"}}}`)
	if code != 201 {
		t.Fatalf("create keep: %d", code)
	}
	code, body, _ := do(t, admin, "DELETE", cms+"?labelSelector=app%3Dx&fieldSelector=metadata.name!%3Dcm-01", "", "")
	if code != 200 || body["kind"] != "ConfigMapList" || fmt.Sprint(names(body)) != "[cm-00 cm-02]" {
		t.Fatalf("deletecollection: %d %v", code, body)
	}
	_, body, _ = do(t, admin, "GET", cms, "", "")
	if fmt.Sprint(names(body)) != "[cm-01 keep]" {
		t.Errorf("left: %v", names(body))
	}
	code, body, _ = do(t, s.client(t, aliceToken), "DELETE", cms, "", "")
	if code != 403 {
		t.Errorf("alice deletecollection: %d %v", code, body)
	}
	code, _, _ = do(t, admin, "DELETE", s.url+"/apis/metrics.k8s.io/v1beta1/namespaces/default/pods", "", "")
	if code != 405 {
		t.Errorf("deletecollection of a read-only view: %d, want 405", code)
	}
	// Pods are deleted gracefully, through the api stage.
	pods := s.url + "/api/v1/namespaces/default/pods"
	for _, n := range []string{"p1", "p2"} {
		if code, body, _ := do(t, admin, "POST", pods, "application/json", podJSON(n, "")); code != 201 {
			t.Fatalf("create %s: %d %v", n, code, body)
		}
	}
	code, body, _ = do(t, admin, "DELETE", pods+"?labelSelector=app%3Dweb", "", "")
	if code != 200 || fmt.Sprint(names(body)) != "[p1 p2]" {
		t.Fatalf("deletecollection pods: %d %v", code, body)
	}
}

// TestGetAnyVersionSeesOwnWrite: a GET with resourceVersion=0 ("any",
// newest preferred) right after a client's own write sees that write, as
// kube-apiserver's watch cache does in practice: the e2e framework's
// taint helpers read a node with resourceVersion=0 and then patch only
// what they found, so a read from a lagging follower left a taint the
// suite had just added on the node for good.
func TestGetAnyVersionSeesOwnWrite(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{replicas: 3})
	admin := s.client(t, adminToken)
	cm := s.url + "/api/v1/namespaces/default/configmaps"
	// 4 clients side by side, each writing its own ConfigMap and reading it
	// back at once 50 times: 200 reads right after their writes. A round
	// trip waits on the replicas, not on the CPU.
	const clients, rounds = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		seq := cm + "/seq-" + strconv.Itoa(c)
		if code, body, _ := do(t, admin, "POST", cm, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"seq-`+strconv.Itoa(c)+`"},"data":{"n":"0"}}`); code != 201 {
			t.Fatalf("create: %d %v", code, body)
		}
		wg.Go(func() {
			for i := 1; i <= rounds; i++ {
				n := strconv.Itoa(i)
				if code, body, _, err := tryDo(admin, "PATCH", seq, "application/merge-patch+json", `{"data":{"n":"`+n+`"}}`); err != nil || code != 200 {
					errs <- fmt.Errorf("patch %d of %s: %d %v %v", i, seq, code, body, err)
					return
				}
				code, body, _, err := tryDo(admin, "GET", seq+"?resourceVersion=0", "", "")
				if err != nil || code != 200 || path(body, "data.n") != n {
					errs <- fmt.Errorf("GET %s?resourceVersion=0 after write %d: %d, data.n %v %v", seq, i, code, path(body, "data.n"), err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
