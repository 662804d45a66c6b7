package chaos

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestKubeWatch reads a Kubernetes watch stream over HTTP as the HTTPS
// watcher does: changes of the prefix's ConfigMaps at their
// resourceVersion (a DELETED as a delete), others left out, a BOOKMARK as
// a resume point without a key, the request resuming at resourceVersion
// with bookmarks asked, and an ERROR event (410 Expired) ending the watch
// with its status.
func TestKubeWatch(t *testing.T) {
	var query string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		for _, line := range []string{
			`{"type":"ADDED","object":{"metadata":{"name":"lin-1","resourceVersion":"5"}}}`,
			`{"type":"ADDED","object":{"metadata":{"name":"other","resourceVersion":"6"}}}`,
			`{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7"}}}`,
			`{"type":"MODIFIED","object":{"metadata":{"name":"lin-1","resourceVersion":"8"}}}`,
			`{"type":"DELETED","object":{"metadata":{"name":"lin-1","resourceVersion":"9"}}}`,
			`{"type":"ERROR","object":{"code":410,"message":"too old resource version"}}`,
		} {
			fmt.Fprintln(w, line)
		}
	}))
	defer srv.Close()
	c := &configMapClient{http: &http.Client{Timeout: 5 * time.Second}, base: srv.URL}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, errf, err := c.kubeWatch("lin-", func(n string) string { return "/k/" + n })(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for r := range ch {
		got = append(got, fmt.Sprintf("%s/%d/%d", r, r.Rev, r.ModRev))
	}
	want := "PUT /k/lin-1@5/5/5,PUT @7/7/0,PUT /k/lin-1@8/8/8,DELETE /k/lin-1@9/9/9"
	if strings.Join(got, ",") != want {
		t.Fatalf("changes %q, want %q", strings.Join(got, ","), want)
	}
	if err := errf(); err == nil || !strings.Contains(err.Error(), "ERROR 410") {
		t.Fatalf("the ERROR event: %v", err)
	}
	for _, q := range []string{"watch=true", "allowWatchBookmarks=true", "resourceVersion=4"} {
		if !strings.Contains(query, q) {
			t.Errorf("query %q has no %s", query, q)
		}
	}
}
