package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
)

// PodStream is one exec or attach session of a pod's container. Nil
// streams were not asked for.
type PodStream struct {
	Container string
	Command   []string // exec; empty for attach
	Attach    bool
	Port      int32 // port-forward: Stdin and Stdout are the connection
	TTY       bool
	Stdin     io.Reader
	Stdout    io.Writer
	Stderr    io.Writer
	Resize    <-chan remotecommand.TerminalSize // terminal resizes (-t)
}

// StreamBackend is implemented by backends that relay pods/exec and
// pods/attach to the pods' nodes. PodStream returns when the session ends:
// nil when the command exited 0; an error with an ExitStatus() int method
// when it exited otherwise.
type StreamBackend interface {
	PodStream(ctx context.Context, pod *corev1.Pod, s PodStream) error
}

// streamSubresources are the pods' streaming subresources.
var streamSubresources = map[string]bool{"exec": true, "attach": true, "portforward": true}

// isStream reports whether path is a pod's streaming subresource (a
// long-running request, as watches are).
func isStream(path string) bool {
	i := strings.LastIndexByte(path, '/')
	return i > 0 && streamSubresources[path[i+1:]] && strings.HasSuffix(path[:strings.LastIndexByte(path[:i], '/')], "/pods")
}

// streamIdleTimeout ends a session no byte has crossed for this long, as
// kubelet's --streaming-connection-idle-timeout (4h).
const streamIdleTimeout = 4 * time.Hour

// serveStream serves pods/exec, pods/attach and pods/portforward and reports whether req
// was one. As kube-apiserver (KEP-4006), the subresource needs create —
// and, for a WebSocket upgrade (a GET), get as well.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, req *request) bool {
	if req.res.name != "pods" || req.res.group != "" || !streamSubresources[req.sub] {
		return false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		writeStatus(w, methodNotAllowed(r.Method, r.URL.Path))
		return true
	}
	verbs := []string{"create"}
	if r.Method == http.MethodGet {
		verbs = append(verbs, "get")
	}
	for _, verb := range verbs {
		attrs := auth.Attributes{User: req.user, Verb: verb, Namespace: req.namespace, Resource: "pods",
			Subresource: req.sub, Name: req.name}
		if d := s.backend.Authorize(attrs); !d.Allowed {
			writeStatus(w, auth.Forbidden(attrs, ""))
			return true
		}
	}
	sb, ok := s.backend.(StreamBackend)
	if !ok {
		writeStatus(w, notFoundPath(r.URL.Path))
		return true
	}
	rctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	obj, st := s.read(rctx, req.res, req.namespace, req.name)
	cancel()
	if st != nil {
		writeStatus(w, st)
		return true
	}
	pod := obj.(*corev1.Pod)
	if st := s.admitConnect(r, req, pod); st != nil {
		writeStatus(w, st)
		return true
	}
	if req.sub == "portforward" {
		s.servePortForward(w, r, sb, pod)
		return true
	}
	q := r.URL.Query()
	container, st := streamContainer(pod, q.Get("container"))
	if st != nil {
		writeStatus(w, st)
		return true
	}
	opts := streamOptions(q)
	if !opts.Stdin && !opts.Stdout && !opts.Stderr {
		writeStatus(w, badRequest("you must specify at least 1 of stdin, stdout, stderr"))
		return true
	}
	ps := PodStream{Container: container, Attach: req.sub == "attach", TTY: opts.TTY}
	if !ps.Attach {
		ps.Command = q["command"]
		if len(ps.Command) == 0 {
			writeStatus(w, badRequest("you must specify at least 1 command"))
			return true
		}
	}
	ex := &podExecutor{b: sb, pod: pod, opts: opts, ps: ps}
	if wsstream.IsWebSocketRequest(r) {
		serveWebSocketStream(w, r, ex, opts)
		return true
	}
	if ps.Attach {
		remotecommand.ServeAttach(w, r, ex, req.name, pod.GetMetadata().GetUid(), container, opts,
			streamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
		return true
	}
	remotecommand.ServeExec(w, r, ex, req.name, pod.GetMetadata().GetUid(), container, ps.Command, opts,
		streamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	return true
}

// servePortForward serves kubectl port-forward with the kubelet streaming
// library, each forwarded connection a session to the node: over SPDY,
// or over WebSocket (portforward_ws.go: SPDY tunneled through it, kubectl
// ≥ 1.31's way, or the kubelet's channel protocol).
func (s *Server) servePortForward(w http.ResponseWriter, r *http.Request, sb StreamBackend, pod *corev1.Pod) {
	if p := pod.GetStatus().GetPhase(); p == "Succeeded" || p == "Failed" || pod.GetSpec().GetNodeName() == "" {
		writeStatus(w, badRequest("pod %s is not running (phase %s, node %q)", pod.GetMetadata().GetName(), p, pod.GetSpec().GetNodeName()))
		return
	}
	if wsstream.IsWebSocketRequest(r) {
		s.servePortForwardWebSocket(w, r, portForwarder{sb, pod}, pod)
		return
	}
	portforward.ServePortForward(w, r, portForwarder{sb, pod}, pod.GetMetadata().GetName(), pod.GetMetadata().GetUid(), nil,
		streamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, portforward.SupportedProtocols)
}

// portForwarder forwards one connection through the backend.
type portForwarder struct {
	b   StreamBackend
	pod *corev1.Pod
}

func (f portForwarder) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	return f.b.PodStream(ctx, f.pod, PodStream{Port: port, Stdin: stream, Stdout: stream})
}

// streamOptions are a session's streams, from PodExecOptions'
// (PodAttachOptions') query; a terminal has no stderr, its output has it.
func streamOptions(q url.Values) *remotecommand.Options {
	on := func(k string) bool { return queryBool(q, k) }
	o := &remotecommand.Options{Stdin: on("stdin"), Stdout: on("stdout"), Stderr: on("stderr"), TTY: on("tty")}
	if o.TTY {
		o.Stderr = false
	}
	return o
}

// streamContainer picks the session's container: the one named, or the
// pod's only one; a finished pod has none to stream.
func streamContainer(pod *corev1.Pod, name string) (string, *corev1.Status) {
	pn := pod.GetMetadata().GetName()
	if p := pod.GetStatus().GetPhase(); p == "Succeeded" || p == "Failed" {
		return "", badRequest("cannot exec into or attach to a container in a completed pod; current phase is %s", p)
	}
	if pod.GetSpec().GetNodeName() == "" {
		return "", badRequest("pod %s does not have a host assigned", pn)
	}
	var names []string
	for _, c := range pod.GetSpec().GetContainers() {
		if c.GetName() == name {
			return name, nil
		}
		names = append(names, c.GetName())
	}
	for _, c := range pod.GetSpec().GetEphemeralContainers() { // kubectl debug attaches by name
		if name != "" && c.GetName() == name {
			return name, nil
		}
	}
	switch {
	case name != "":
		return "", badRequest("container %s is not valid for pod %s", name, pn)
	case len(names) == 1:
		return names[0], nil
	}
	return "", badRequest("a container name must be specified for pod %s, choose one of: %v", pn, names)
}

// podExecutor runs the kubelet streaming library's sessions through the
// backend.
type podExecutor struct {
	b    StreamBackend
	pod  *corev1.Pod
	opts *remotecommand.Options
	ps   PodStream
}

func (e *podExecutor) ExecInContainer(ctx context.Context, _, _, _ string, _ []string, in io.Reader, out, errw io.WriteCloser,
	_ bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	return e.run(ctx, in, out, errw, resize)
}

func (e *podExecutor) AttachContainer(ctx context.Context, _, _, _ string, in io.Reader, out, errw io.WriteCloser,
	_ bool, resize <-chan remotecommand.TerminalSize) error {
	return e.run(ctx, in, out, errw, resize)
}

func (e *podExecutor) run(ctx context.Context, in io.Reader, out, errw io.Writer, resize <-chan remotecommand.TerminalSize) error {
	ps := e.ps
	if e.opts.Stdin && in != nil {
		ps.Stdin = in
	}
	if e.opts.Stdout && out != nil {
		ps.Stdout = out
	}
	if e.opts.Stderr && errw != nil && !e.opts.TTY { // a terminal has one output
		ps.Stderr = errw
	}
	ps.Resize = resize
	err := e.b.PodStream(ctx, e.pod, ps)
	var ec interface{ ExitStatus() int }
	if errors.As(err, &ec) {
		return utilexec.CodeExitError{Err: err, Code: ec.ExitStatus()}
	}
	return err
}

// The remote command WebSocket channels.
const (
	wsStdin = iota
	wsStdout
	wsStderr
	wsError
	wsResize
)

// WebSocket subprotocols of exec and attach, as kube-apiserver serves them
// (v5 itself, the older ones as the kubelet it proxies them to).
const (
	wsChannelV4       = "v4." + wsstream.ChannelWebSocketProtocol
	wsBase64ChannelV4 = "v4." + wsstream.Base64ChannelWebSocketProtocol
)

// serveWebSocketStream serves a session over WebSocket in every
// subprotocol kube-apiserver accepts: v5.channel.k8s.io (kubectl ≥ 1.30,
// with stdin's CLOSE signal), v4.channel.k8s.io and
// v4.base64.channel.k8s.io (the status as JSON), and the older
// channel.k8s.io, base64.channel.k8s.io and no subprotocol (binary; the
// error channel carries the failure's message only), with wsstream's
// framing: a channel byte, then the data (base64 text frames for the
// base64 protocols).
func serveWebSocketStream(w http.ResponseWriter, r *http.Request, ex *podExecutor, opts *remotecommand.Options) {
	ch := func(real bool, t wsstream.ChannelType) wsstream.ChannelType {
		if real {
			return t
		}
		return wsstream.IgnoreChannel
	}
	channels := []wsstream.ChannelType{
		wsStdin:  ch(opts.Stdin, wsstream.ReadChannel),
		wsStdout: ch(opts.Stdout, wsstream.WriteChannel),
		wsStderr: ch(opts.Stderr, wsstream.WriteChannel),
		wsError:  wsstream.WriteChannel,
		wsResize: wsstream.ReadChannel,
	}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		remotecommand.StreamProtocolV5Name:      {Binary: true, Channels: channels},
		wsChannelV4:                             {Binary: true, Channels: channels},
		wsBase64ChannelV4:                       {Binary: false, Channels: channels},
		wsstream.ChannelWebSocketProtocol:       {Binary: true, Channels: channels},
		wsstream.Base64ChannelWebSocketProtocol: {Binary: false, Channels: channels},
		"":                                      {Binary: true, Channels: channels},
	})
	conn.SetIdleTimeout(streamIdleTimeout)
	protocol, streams, err := conn.Open(w, r)
	if err != nil {
		return // Open answered the client
	}
	defer conn.Close()
	// An empty message on the lowest writable channel: the session is up.
	switch {
	case opts.Stdout:
		_, _ = streams[wsStdout].Write(nil)
	case opts.Stderr:
		_, _ = streams[wsStderr].Write(nil)
	default:
		_, _ = streams[wsError].Write(nil)
	}
	var resize chan remotecommand.TerminalSize
	if opts.TTY {
		resize = make(chan remotecommand.TerminalSize)
		go func() { // ends when the connection closes
			defer close(resize)
			dec := json.NewDecoder(streams[wsResize])
			for {
				var sz remotecommand.TerminalSize
				if err := dec.Decode(&sz); err != nil {
					return
				}
				select {
				case resize <- sz:
				case <-r.Context().Done():
					return
				}
			}
		}()
	}
	err = ex.run(r.Context(), streams[wsStdin], streams[wsStdout], streams[wsStderr], resize)
	st := execStatus(err)
	switch protocol {
	case remotecommand.StreamProtocolV5Name, wsChannelV4, wsBase64ChannelV4:
		b, _ := json.Marshal(st)
		_, _ = streams[wsError].Write(b)
	default: // before v4: the failure's message, nothing on success
		if st.Status != metav1.StatusSuccess {
			_, _ = streams[wsError].Write([]byte(st.Message))
		}
	}
}

// execStatus is the status a session ends with, as the kubelet's.
func execStatus(err error) *metav1.Status {
	var xe utilexec.ExitError
	switch {
	case err == nil:
		return &metav1.Status{Status: metav1.StatusSuccess}
	case errors.As(err, &xe) && xe.Exited():
		return &metav1.Status{Status: metav1.StatusFailure, Reason: remotecommand.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", err),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{
				Type: remotecommand.ExitCodeCauseType, Message: fmt.Sprint(xe.ExitStatus())}}}}
	}
	return &metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonInternalError,
		Message: fmt.Sprintf("error executing command in container: %v", err)}
}
