package apiserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

// podLog serves pods/log: the log streamed from the node, each piece
// written and flushed as it comes (kube-apiserver proxies the kubelet's
// stream alike). A follow runs as long as the client stays (it is
// long-running: see limiter), otherwise RequestTimeout bounds it.
func (s *Server) podLog(ctx context.Context, w http.ResponseWriter, r *http.Request, req *request, obj objects.Object) {
	lb, ok := s.backend.(LogBackend)
	pod, isPod := obj.(*corev1.Pod)
	if !ok || !isPod {
		writeStatus(w, stage.Failure(404, eventsv1.ReasonNotFound, "pods", req.name, "logs of pod %q are not available", req.name))
		return
	}
	opts, st := logOptions(r.URL.Query(), time.Now())
	if st != nil {
		writeStatus(w, st)
		return
	}
	if opts.Follow {
		ctx = r.Context()
	}
	stream, st := lb.PodLogs(ctx, pod, opts)
	if st != nil {
		writeStatus(w, st)
		return
	}
	if wsstream.IsWebSocketRequest(r) {
		// As kube-apiserver streams a log to a WebSocket client: 101
		// Switching Protocols, an empty message first, then the log in
		// binary messages ("" or binary.k8s.io) or base64 text messages
		// (base64.binary.k8s.io).
		rd := wsstream.NewReader(&logReader{ctx: ctx, stream: stream}, true, wsstream.NewDefaultReaderProtocols())
		if err := rd.Copy(w, r); err != nil {
			s.log.Debug("pods/log over websocket", "pod", req.name, "err", err)
		}
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	for {
		text, err := stream.Next(ctx)
		if err != nil {
			return // the end, or the node went away: the body just ends
		}
		if _, err := w.Write(text); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// logReader reads a LogStream as an io.Reader.
type logReader struct {
	ctx    context.Context
	stream LogStream
	buf    []byte
}

func (l *logReader) Read(p []byte) (int, error) {
	for len(l.buf) == 0 {
		text, err := l.stream.Next(l.ctx)
		if err != nil {
			if errors.Is(err, io.EOF) || l.ctx.Err() != nil {
				return 0, io.EOF
			}
			return 0, err
		}
		l.buf = text
	}
	n := copy(p, l.buf)
	l.buf = l.buf[n:]
	return n, nil
}

// logOptions reads PodLogOptions from the query, validated as
// Kubernetes validates them.
func logOptions(q url.Values, now time.Time) (LogOptions, *corev1.Status) {
	o := LogOptions{
		Container: q.Get("container"), Previous: queryBool(q, "previous"),
		Follow: queryBool(q, "follow"), Timestamps: queryBool(q, "timestamps"),
	}
	num := func(name string, min int64) (*int64, *corev1.Status) {
		v := q.Get(name)
		if v == "" {
			return nil, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < min {
			return nil, badRequest("%s: must be an integer of at least %d, got %q", name, min, v)
		}
		return &n, nil
	}
	var st *corev1.Status
	if o.TailLines, st = num("tailLines", 0); st != nil {
		return o, st
	}
	limit, st := num("limitBytes", 1)
	if st != nil {
		return o, st
	}
	if limit != nil {
		o.LimitBytes = *limit
	}
	since, st := num("sinceSeconds", 1)
	if st != nil {
		return o, st
	}
	if since != nil {
		o.Since = now.Add(-time.Duration(*since) * time.Second)
	}
	if v := q.Get("sinceTime"); v != "" {
		if since != nil {
			return o, badRequest("at most one of sinceTime or sinceSeconds may be specified")
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return o, badRequest("sinceTime: %v", err)
		}
		o.Since = t
	}
	return o, nil
}
