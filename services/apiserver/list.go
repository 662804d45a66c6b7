package apiserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stage"
)

// resourceVersionMatch values (meta/v1 ListOptions).
const (
	matchExact        = "Exact"
	matchNotOlderThan = "NotOlderThan"
)

// Kubernetes' messages for a list that cannot be served at the revision
// asked for (k8s.io/apiserver's etcd3 store).
const (
	msgListExpired     = "The resourceVersion for the provided list is too old."
	msgContinueExpired = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
)

// continueToken is Kubernetes' continue token (k8s.io/apiserver
// storage.EncodeContinue): base64url of {"v","rv","start"}, start being
// the first key of the next page relative to the list's key prefix. rv -1
// continues at the latest revision (the inconsistent continuation a 410
// offers).
type continueToken struct {
	APIVersion      string `json:"v"`
	ResourceVersion int64  `json:"rv"`
	StartKey        string `json:"start"`
}

func encodeContinue(rev int64, start string) string {
	b, _ := json.Marshal(&continueToken{APIVersion: "meta.k8s.io/v1", ResourceVersion: rev, StartKey: start})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(s string) (*continueToken, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("continue key is not valid: %w", err)
	}
	var t continueToken
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("continue key is not valid: %w", err)
	}
	switch {
	case t.APIVersion != "meta.k8s.io/v1":
		return nil, fmt.Errorf("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
	case t.ResourceVersion == 0 || t.ResourceVersion < -1:
		return nil, fmt.Errorf("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
	case t.StartKey == "":
		return nil, fmt.Errorf("continue key is not valid: encoded start key empty")
	}
	return &t, nil
}

// listOptions are a list's paging and resourceVersion parameters, checked
// as kube-apiserver checks them.
type listOptions struct {
	limit int64
	token *continueToken // nil: the first page
	rv    int64          // -1: not given (the most recent); 0: any
	exact bool           // the list must be of revision rv exactly
}

func parseListOptions(q url.Values) (*listOptions, *corev1.Status) {
	o := &listOptions{rv: -1}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, badRequest("limit %q is not a non-negative integer", v)
		}
		o.limit = n
	}
	if v := q.Get("resourceVersion"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, badRequest("resourceVersion %q is not a valid revision", v)
		}
		o.rv = n
	}
	match := q.Get("resourceVersionMatch")
	switch {
	case match != "" && match != matchExact && match != matchNotOlderThan:
		return nil, badRequest("resourceVersionMatch: Unsupported value: %q: supported values: %q, %q", match, matchExact, matchNotOlderThan)
	case match != "" && o.rv < 0:
		return nil, badRequest("resourceVersionMatch is forbidden unless resourceVersion is provided")
	case match == matchExact && o.rv == 0:
		return nil, badRequest("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"")
	}
	if c := q.Get("continue"); c != "" {
		switch {
		case match != "":
			return nil, badRequest("resourceVersionMatch is forbidden when continue is provided")
		case o.rv > 0:
			return nil, badRequest("specifying resource version is not allowed when using continue")
		}
		t, err := decodeContinue(c)
		if err != nil {
			return nil, badRequest("%v", err)
		}
		o.token, o.rv = t, -1
	}
	// A non-zero resourceVersion is exact when asked for, or for the first
	// page of a paged list; otherwise "not older than".
	o.exact = o.rv > 0 && (match == matchExact || (match == "" && o.limit > 0))
	return o, nil
}

// listSnapshot is every object under a list's key prefix at one revision,
// sorted by key, with its Kubernetes form.
type listSnapshot struct {
	id      string // group version, prefix and revision
	rev     int64
	prefix  string
	items   []kubeItem
	expires time.Time
}

func snapshotID(res *resource, prefix string, rev int64) string {
	return res.cacheKey() + "|" + prefix + "|" + strconv.FormatInt(rev, 10)
}

// page returns up to limit (0: all) items matching sel from the key
// prefix+start on, the start of the next page ("" when this is the last)
// and, without selectors, how many items remain after it.
func (sn *listSnapshot) page(start string, limit int64, sel *selector) ([]kubeItem, string, *int64) {
	first := sort.Search(len(sn.items), func(i int) bool { return sn.items[i].key >= sn.prefix+start })
	var out []kubeItem
	i := first
	for ; i < len(sn.items); i++ {
		if limit > 0 && int64(len(out)) == limit {
			break
		}
		if sel.matches(sn.items[i].obj) {
			out = append(out, sn.items[i])
		}
	}
	if i == len(sn.items) {
		return out, "", nil
	}
	next := strings.TrimPrefix(out[len(out)-1].key, sn.prefix) + "\x00"
	var remaining *int64
	if sel.labels.Empty() && sel.fields.Empty() {
		n := int64(len(sn.items) - i)
		remaining = &n
	}
	return out, next, remaining
}

// snapshots keeps the snapshots of paged lists for their continue pages:
// at most max, each for ttl.
type snapshots struct {
	max int
	ttl time.Duration

	mu    sync.Mutex
	m     map[string]*listSnapshot
	order []string // insertion order, oldest first
}

func newSnapshots(max int, ttl time.Duration) *snapshots {
	return &snapshots{max: max, ttl: ttl, m: make(map[string]*listSnapshot)}
}

func (c *snapshots) get(id string, now time.Time) *listSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	sn := c.m[id]
	if sn == nil || now.After(sn.expires) {
		return nil
	}
	return sn
}

func (c *snapshots) put(sn *listSnapshot, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[sn.id]; ok {
		return
	}
	sn.expires = now.Add(c.ttl)
	c.m[sn.id] = sn
	c.order = append(c.order, sn.id)
	for len(c.order) > 0 && (len(c.order) > c.max || now.After(c.m[c.order[0]].expires)) {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
}

// readSnapshot reads every object of a list from the store (a
// linearizable read) and converts it.
func (s *Server) readSnapshot(ctx context.Context, req *request) (*listSnapshot, *corev1.Status) {
	prefix := req.res.store.Prefix(req.namespace)
	kvs, rev, err := s.store.KV().List(ctx, prefix)
	if err != nil {
		return nil, storeStatus(err, req.res, "")
	}
	sn := &listSnapshot{id: snapshotID(req.res, prefix, rev), rev: rev, prefix: prefix, items: make([]kubeItem, 0, len(kvs))}
	for _, kv := range kvs {
		k, raw, err := s.cache.convert(req.res, kv)
		if err != nil {
			return nil, stage.Internal(err)
		}
		sn.items = append(sn.items, kubeItem{key: kv.Key, obj: k, raw: raw})
	}
	return sn, nil
}

// resolveList finds the snapshot a list is served from, with
// Kubernetes' resourceVersion semantics: the most recent without one (or
// with "0"); not older than it; exactly it (from a paged list's kept
// snapshot, or the store when nothing has been written since; 410 Expired
// otherwise, as for a compacted etcd revision); a continue token's
// snapshot (410 Expired, with a token to continue at the latest
// revision, once it is gone).
func (s *Server) resolveList(ctx context.Context, req *request, o *listOptions) (*listSnapshot, *metav1.Status) {
	prefix := req.res.store.Prefix(req.namespace)
	now := time.Now()
	want := o.rv
	if o.token != nil {
		want = o.token.ResourceVersion
	}
	if want > 0 && (o.exact || o.token != nil) {
		if sn := s.snapshots.get(snapshotID(req.res, prefix, want), now); sn != nil {
			return sn, nil
		}
	}
	sn, st := s.readSnapshot(ctx, req)
	if st != nil {
		return nil, kubeStatus(st)
	}
	switch {
	case o.token != nil && want > 0 && sn.rev != want:
		out := gone410(msgContinueExpired)
		out.ListMeta.Continue = encodeContinue(-1, o.token.StartKey)
		return nil, out
	case want > 0 && sn.rev < want:
		if st := s.waitForRevision(ctx, req, want); st != nil {
			return nil, st
		}
		if sn, st = s.readSnapshot(ctx, req); st != nil {
			return nil, kubeStatus(st)
		}
		if o.exact && sn.rev != want {
			return nil, gone410(msgListExpired)
		}
	case o.exact && sn.rev != want:
		return nil, gone410(msgListExpired)
	}
	return sn, nil
}

func gone410(msg string) *metav1.Status {
	return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Message: msg, Reason: metav1.StatusReasonExpired, Code: http.StatusGone}
}

// list answers a list, one page of it when limit is given: the first page
// is read from the store, and the rest of its snapshot is kept
// (Config.ListSnapshotTTL) so that every continue page comes from the same
// revision, as from etcd.
func (s *Server) list(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request) {
	sel, st := parseSelector(r, req.res)
	if st == nil {
		var o *listOptions
		if o, st = parseListOptions(r.URL.Query()); st == nil {
			s.listPage(ctx, w, r, req, sel, o)
			return
		}
	}
	writeStatus(w, st)
}

func (s *Server) listPage(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request, sel *selector, o *listOptions) {
	sn, mst := s.resolveList(ctx, req, o)
	if mst != nil {
		writeJSON(w, int(mst.Code), mst)
		return
	}
	start := ""
	if o.token != nil {
		start = o.token.StartKey
	}
	items, next, remaining := sn.page(start, o.limit, sel)
	meta := metav1.ListMeta{ResourceVersion: strconv.FormatInt(sn.rev, 10), RemainingItemCount: remaining}
	if next != "" {
		meta.Continue = encodeContinue(sn.rev, next)
		s.snapshots.put(sn, time.Now())
	}
	if wantsTable(r) {
		t := newTable(req.res, true, s.cfg.Printer)
		for _, it := range items {
			t.addRow(req.res, it.obj)
		}
		t.ListMeta = meta
		writeJSON(w, http.StatusOK, t.Table)
		return
	}
	writeList(w, r, req.res, meta, items)
}
