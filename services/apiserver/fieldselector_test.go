package apiserver_test

import (
	"fmt"
	"net/url"
	"sort"
	"testing"
)

func sortedNames(body map[string]any) []string {
	out := names(body)
	sort.Strings(out)
	return out
}

// TestFieldSelectors: field selectors are evaluated on the kind's
// selectable fields with kube-apiserver's value formatting (a false bool
// is "false", not absent: `kubectl get nodes --field-selector
// spec.unschedulable=false` is what the e2e suite's BeforeSuite runs), and
// a label the kind does not support is refused with kube-apiserver's 400.
func TestFieldSelectors(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	post := func(url, body string) {
		t.Helper()
		if code, b, _ := do(t, admin, "POST", url, "application/json", body); code != 201 {
			t.Fatalf("POST %s: %d %v", url, code, b)
		}
	}
	post(s.url+"/api/v1/nodes", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n-free"}}`)
	post(s.url+"/api/v1/nodes", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n-cordoned"},"spec":{"unschedulable":true}}`)
	post(s.url+"/api/v1/namespaces/default/secrets", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"tls"},"type":"kubernetes.io/tls","data":{"tls.crt":"","tls.key":""}}`)
	post(s.url+"/api/v1/namespaces/default/secrets", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"plain"},"stringData":{"a":"b"}}`)
	post(s.url+"/api/v1/namespaces/default/events", `{"apiVersion":"v1","kind":"Event","metadata":{"name":"e1"},
		"involvedObject":{"kind":"Pod","namespace":"default","name":"web","uid":"u-1"},"reason":"Started","type":"Normal","source":{"component":"kubelet"}}`)
	post(s.url+"/api/v1/namespaces/default/events", `{"apiVersion":"v1","kind":"Event","metadata":{"name":"e2"},
		"involvedObject":{"kind":"Pod","namespace":"default","name":"db"},"reason":"BackOff","type":"Warning","reportingComponent":"sched"}`)
	post(s.url+"/api/v1/namespaces/default/pods", podJSON("web", ""))

	for _, c := range []struct {
		path, selector string
		want           []string
	}{
		{"/api/v1/nodes", "spec.unschedulable=false", []string{"n-free"}},
		{"/api/v1/nodes", "spec.unschedulable!=true", []string{"n-free"}},
		{"/api/v1/nodes", "spec.unschedulable=true", []string{"n-cordoned"}},
		{"/api/v1/nodes", "metadata.name=n-cordoned", []string{"n-cordoned"}},
		{"/api/v1/namespaces/default/secrets", "type=kubernetes.io/tls", []string{"tls"}},
		{"/api/v1/namespaces/default/secrets", "type=Opaque", []string{"plain"}},
		{"/api/v1/namespaces/default/events", "involvedObject.name=web,involvedObject.uid=u-1", []string{"e1"}},
		{"/api/v1/namespaces/default/events", "type=Warning", []string{"e2"}},
		{"/api/v1/namespaces/default/events", "source=kubelet", []string{"e1"}},
		{"/api/v1/namespaces/default/events", "source=sched", []string{"e2"}}, // reportingComponent stands in
		{"/apis/events.k8s.io/v1/namespaces/default/events", "regarding.name=db", []string{"e2"}},
		{"/apis/events.k8s.io/v1/namespaces/default/events", "reportingController=sched", []string{"e2"}},
		{"/api/v1/namespaces/default/pods", "status.phase=Pending,spec.restartPolicy=Always", []string{"web"}},
		{"/api/v1/namespaces/default/pods", "spec.schedulerName=default-scheduler,spec.hostNetwork=false", []string{"web"}},
		{"/api/v1/namespaces/default/pods", "spec.host=", []string{"web"}}, // old clients' name of spec.nodeName
		{"/api/v1/namespaces/default/pods", "status.phase=Running", nil},
		{"/api/v1/namespaces", "status.phase=Active", []string{"default", "kube-node-lease", "kube-public", "kube-system"}},
		{"/api/v1/namespaces/default/configmaps", "metadata.namespace=default", nil},
	} {
		code, body, _ := do(t, admin, "GET", s.url+c.path+"?fieldSelector="+url.QueryEscape(c.selector), "", "")
		if code != 200 {
			t.Errorf("%s %s: %d %v", c.path, c.selector, code, body)
			continue
		}
		if got := sortedNames(body); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s ?fieldSelector=%s = %v, want %v", c.path, c.selector, got, c.want)
		}
	}

	// Labels the kind does not support: kube-apiserver's 400 and message.
	for _, c := range []struct{ path, selector, message string }{
		{"/api/v1/nodes", "spec.podCIDR=x", "field label not supported: spec.podCIDR"},
		{"/api/v1/namespaces/default/pods", "spec.containers=x", "field label not supported: spec.containers"},
		{"/api/v1/namespaces/default/events", "message=x", "field label not supported: message"},
		{"/apis/events.k8s.io/v1/namespaces/default/events", "involvedObject.name=x", "field label not supported: involvedObject.name"},
		{"/api/v1/namespaces/default/configmaps", "data.a=b", `"data.a" is not a known field selector: only "metadata.name", "metadata.namespace"`},
	} {
		for _, q := range []string{"", "&watch=true"} {
			code, body, _ := do(t, admin, "GET", s.url+c.path+"?fieldSelector="+url.QueryEscape(c.selector)+q, "", "")
			if code != 400 || body["reason"] != "BadRequest" || body["message"] != c.message {
				t.Errorf("%s ?fieldSelector=%s%s: %d %v, want 400 %q", c.path, c.selector, q, code, body, c.message)
			}
		}
	}
	code, body, _ := do(t, admin, "DELETE", s.url+"/api/v1/nodes?fieldSelector=spec.taints%3Dx", "", "")
	if code != 400 || body["message"] != "field label not supported: spec.taints" {
		t.Errorf("deletecollection with an unsupported label: %d %v", code, body)
	}
}
