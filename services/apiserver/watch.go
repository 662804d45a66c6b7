package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/stage"
)

// Watch event types of the wire protocol.
const (
	eventAdded    = "ADDED"
	eventModified = "MODIFIED"
	eventDeleted  = "DELETED"
	eventBookmark = "BOOKMARK"
	eventError    = "ERROR"
)

type watchEvent struct {
	Type   string `json:"type"`
	Object any    `json:"object"`
}

// gone is the Status of a watch from a compacted revision, as
// kube-apiserver words it; clients relist.
func gone(rev int64, err error) *corev1.Status {
	return &corev1.Status{Status: "Failure", Code: 410, Reason: "Expired",
		Message: "too old resource version: " + strconv.FormatInt(rev, 10) + " (" + err.Error() + ")"}
}

// waitForRevision waits up to Config.TooLargeResourceVersionWait for the
// store to reach rev, as kube-apiserver's watch cache waits for a
// resourceVersion it has not seen; past that the watch is answered 504
// "Too large resource version" (clients retry or relist) rather than left
// hanging.
func (s *Server) waitForRevision(ctx context.Context, req *request, rev int64) *metav1.Status {
	deadline := time.Now().Add(s.cfg.TooLargeResourceVersionWait)
	for {
		_, current, err := s.store.Client().List(ctx, req.res.store.Prefix(req.namespace), raftstore.WithLimit(1))
		if err != nil {
			return kubeStatus(storeStatus(err, req.res, ""))
		}
		if current >= rev {
			return nil
		}
		if time.Now().After(deadline) {
			return tooLargeResourceVersion(rev, current)
		}
		select {
		case <-ctx.Done():
			return tooLargeResourceVersion(rev, current)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watch streams changes as newline-delimited JSON watch events, as
// kube-apiserver does over HTTP/1.1 chunks or HTTP/2 frames. Without a
// resourceVersion (or "0") it starts with an ADDED event per existing
// object; from a resourceVersion it sends every change after it, or one
// ERROR event with 410 Expired when that history is compacted. With
// allowWatchBookmarks it sends a BOOKMARK with the latest revision every
// BookmarkInterval. Selector semantics follow Kubernetes: an object that
// stops matching is sent as DELETED.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, req *request) {
	sel, st := parseSelector(r, req.res)
	if st != nil {
		writeStatus(w, st)
		return
	}
	q := r.URL.Query()
	timeout := s.cfg.MaxWatchTimeout/2 + time.Duration(rand.Int64N(int64(s.cfg.MaxWatchTimeout/2)))
	if v := q.Get("timeoutSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeStatus(w, badRequest("timeoutSeconds %q is not a non-negative integer", v))
			return
		}
		if d := time.Duration(n) * time.Second; n > 0 && d < s.cfg.MaxWatchTimeout {
			timeout = d
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	var from int64
	var initial []kubeItem
	// sendInitialEvents (client-go's streaming list, "WatchList") asks for
	// the current state as ADDED events whatever the resourceVersion (a
	// linearizable read is never older than it), closed by a BOOKMARK
	// annotated k8s.io/initial-events-end.
	initialEvents := queryBool(q, "sendInitialEvents")
	switch rv := q.Get("resourceVersion"); {
	case rv == "" || rv == "0" || initialEvents:
		items, rev, st := s.listKube(ctx, req, sel)
		if st != nil {
			writeStatus(w, st)
			return
		}
		initial, from = items, rev
	default:
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil || n < 0 {
			writeStatus(w, badRequest("resourceVersion %q is not a valid revision", rv))
			return
		}
		if st := s.waitForRevision(ctx, req, n); st != nil {
			writeJSON(w, int(st.Code), st)
			return
		}
		from = n
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	asTable := wantsTable(r)
	columnsSent := false
	send := func(typ string, k runtime.Object) bool {
		var obj any = k
		if asTable && typ != eventBookmark && typ != eventError {
			t := newTable(req.res, !columnsSent, s.cfg.Printer)
			columnsSent = true
			t.addRow(req.res, k)
			t.ResourceVersion = metaOf(k).GetResourceVersion()
			obj = &t.Table
		}
		if err := enc.Encode(watchEvent{Type: typ, Object: obj}); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	sendStatus := func(st *corev1.Status) { _ = enc.Encode(watchEvent{Type: eventError, Object: kubeStatus(st)}) }

	visible := map[string]bool{} // keys of objects the client holds (selector watches)
	listed := initial != nil
	for _, it := range initial {
		md := metaOf(it.obj)
		visible[md.GetNamespace()+"/"+md.GetName()] = true
		if !send(eventAdded, it.obj) {
			return
		}
	}
	if initialEvents {
		if !send(eventBookmark, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: req.res.kind, APIVersion: req.res.groupVersion()},
			ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatInt(from, 10),
				Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}) {
			return
		}
	}
	if flusher != nil {
		flusher.Flush()
	}
	wt, err := s.store.KV().Watch(ctx, req.res.store.Prefix(req.namespace), from)
	if err != nil {
		if errors.Is(err, raftstore.ErrGone) {
			sendStatus(gone(from, err))
		} else if ctx.Err() == nil {
			sendStatus(storeStatus(err, req.res, ""))
		}
		return
	}
	defer wt.Stop()
	var bookmarks <-chan time.Time
	if queryBool(q, "allowWatchBookmarks") {
		t := time.NewTicker(s.cfg.BookmarkInterval)
		defer t.Stop()
		bookmarks = t.C
	}
	last := from
	for {
		select {
		case <-ctx.Done():
			return
		case <-bookmarks:
			bm := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: req.res.kind, APIVersion: req.res.groupVersion()},
				ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatInt(last, 10)}}
			if !send(eventBookmark, bm) {
				return
			}
		case ev, ok := <-wt.Events():
			if !ok {
				if err := wt.Err(); errors.Is(err, raftstore.ErrGone) {
					sendStatus(gone(last, err))
				} else if err != nil && ctx.Err() == nil {
					sendStatus(stage.Internal(err))
				}
				return
			}
			last = ev.Revision
			k, _, err := s.cache.convert(req.res, ev.KV)
			if err != nil {
				sendStatus(stage.Internal(err))
				return
			}
			if ev.Type == raftstore.EventDelete {
				s.cache.forget(req.res, ev.KV.Key)
			}
			md := metaOf(k)
			key := md.GetNamespace() + "/" + md.GetName()
			typ := eventModified
			switch {
			case ev.Type == raftstore.EventDelete:
				typ = eventDeleted
				if !sel.matches(k) && !visible[key] {
					continue
				}
				delete(visible, key)
			case sel.matches(k):
				// New, or entering the view of a watch that listed what it
				// showed (a watch from a resourceVersion cannot tell).
				if ev.KV.CreateRevision == ev.KV.ModRevision || (listed && !visible[key]) {
					typ = eventAdded
				}
				visible[key] = true
			case visible[key]:
				typ = eventDeleted // it no longer matches: gone from the client's view
				delete(visible, key)
			default:
				continue
			}
			if !send(typ, k) {
				return
			}
		}
	}
}
