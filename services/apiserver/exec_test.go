package apiserver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/utils/exec"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/nodeexec"
)

// fakeNode answers exec sessions for pod "web" on node n1: "echo args…"
// prints its arguments, "cat" copies stdin, "exit N" exits N, "tty"
// reports whether it has a terminal and the first size; attach and port
// 80 echo.
type fakeNode struct{}

// nodeSessions counts the fake node's sessions in progress.
var nodeSessions atomic.Int64

func (fakeNode) Exec(ctx context.Context, req nodeexec.Request, st nodeexec.Streams) error {
	nodeSessions.Add(1)
	defer nodeSessions.Add(-1)
	if req.Pod != "web" || (req.Port == 0 && req.Container != "c") {
		return fmt.Errorf("%w: %s/%s", nodeexec.ErrNotFound, req.Pod, req.Container)
	}
	switch {
	case req.Port == 80 || req.Attach:
		_, err := io.Copy(st.Stdout, st.Stdin)
		return err
	case req.Port != 0:
		return fmt.Errorf("connection refused on port %d", req.Port)
	}
	switch req.Command[0] {
	case "echo":
		fmt.Fprintln(st.Stdout, strings.Join(req.Command[1:], " "))
		fmt.Fprintln(st.Stderr, "to stderr")
	case "cat":
		_, err := io.Copy(st.Stdout, st.Stdin)
		return err
	case "exit":
		n, _ := strconv.Atoi(req.Command[1])
		return &nodeexec.ExitError{Code: n}
	case "tty":
		sz := <-st.Resize
		fmt.Fprintf(st.Stdout, "tty=%v %dx%d stderr=%v", req.TTY, sz.Width, sz.Height, st.Stderr != nil)
	}
	return nil
}

type fixedSize struct{ sent bool }

func (f *fixedSize) Next() *remotecommand.TerminalSize {
	if f.sent {
		time.Sleep(50 * time.Millisecond)
		return nil
	}
	f.sent = true
	return &remotecommand.TerminalSize{Width: 120, Height: 40}
}

// startExecSystem is startSystem with a fake node n1 answering exec
// sessions and pod web on it, and an admin client.
func startExecSystem(t *testing.T) (*system, *rest.Config, *kubernetes.Clientset) {
	t.Helper()
	return startExecSystemWith(t, options{})
}

// startExecSystemWith is startExecSystem with o's options.
func startExecSystemWith(t *testing.T, o options) (*system, *rest.Config, *kubernetes.Clientset) {
	t.Helper()
	s := startSystem(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv, err := nodeexec.Serve(s.conn.NATS(), nodeexec.DefaultConfig(), "n1", fakeNode{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	if _, err := s.store.Create(ctx, &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: "web", Namespace: "default", Uid: "u-web"},
		Spec:     &corev1.PodSpec{NodeName: "n1", Containers: []*corev1.Container{{Name: "c", Image: "busybox"}}},
		Status:   &corev1.PodStatus{Phase: "Running"},
	}); err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: s.url, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, cfg, cs
}

// TestPortForward forwards two connections with client-go's port
// forwarder (kubectl port-forward, SPDY) to the fake node, which echoes
// port 80 and refuses others.
func TestPortForward(t *testing.T) {
	t.Parallel()
	_, cfg, cs := startExecSystem(t)
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("web").SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", u)
	stop, ready := make(chan struct{}), make(chan struct{})
	var pfErr bytes.Buffer
	pf, err := portforward.New(dialer, []string{"0:80", "0:81"}, stop, ready, io.Discard, &pfErr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	defer func() { close(stop); <-done }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("ForwardPorts: %v", err)
	}
	ports, err := pf.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	roundTrip := func(local uint16, msg string) (string, error) {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(local))))
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, msg); err != nil {
			return "", err
		}
		_ = c.(*net.TCPConn).CloseWrite()
		b, err := io.ReadAll(c)
		return string(b), err
	}
	for i, msg := range []string{"ping\n", strings.Repeat("x", 300<<10)} {
		if got, err := roundTrip(ports[0].Local, msg); err != nil || got != msg {
			t.Fatalf("connection %d through port 80: %.40q, %v", i, got, err)
		}
	}
	if got, _ := roundTrip(ports[1].Local, "ping"); got != "" {
		t.Errorf("port 81 answered %q", got)
	}
}

// TestExec runs kubectl's exec and attach — client-go's remotecommand, over
// WebSocket (v5.channel.k8s.io) and SPDY — through the api stage to a
// fake node over NATS.
func TestExec(t *testing.T) {
	t.Parallel()
	s, cfg, cs := startExecSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	newExec := func(t *testing.T, cfg *rest.Config, transport string, u *url.URL) remotecommand.Executor {
		t.Helper()
		var e remotecommand.Executor
		var err error
		switch transport {
		case "websocket":
			e, err = remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
		default:
			e, err = remotecommand.NewSPDYExecutor(cfg, "POST", u)
		}
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	execURL := func(cmd []string, stdin, tty bool) *url.URL {
		return cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("web").SubResource("exec").
			VersionedParams(&k8scorev1.PodExecOptions{Container: "c", Command: cmd, Stdin: stdin, Stdout: true, Stderr: !tty, TTY: tty},
				scheme.ParameterCodec).URL()
	}
	attachURL := func() *url.URL {
		return cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("web").SubResource("attach").
			VersionedParams(&k8scorev1.PodAttachOptions{Container: "c", Stdin: true, Stdout: true, Stderr: true},
				scheme.ParameterCodec).URL()
	}
	for _, transport := range []string{"websocket", "spdy"} {
		t.Run(transport, func(t *testing.T) {
			for _, c := range []struct {
				name           string
				url            *url.URL
				stdin          string
				tty            bool
				stdout, stderr string
				code           int
			}{
				{name: "exec", url: execURL([]string{"echo", "hello", "world"}, false, false), stdout: "hello world\n", stderr: "to stderr\n"},
				{name: "exec with stdin", url: execURL([]string{"cat"}, true, false), stdin: strings.Repeat("line\n", 20000), stdout: strings.Repeat("line\n", 20000)},
				{name: "exit code", url: execURL([]string{"exit", "7"}, false, false), code: 7},
				{name: "tty", url: execURL([]string{"tty"}, false, true), tty: true, stdout: "tty=true 120x40 stderr=false"},
				{name: "attach", url: attachURL(), stdin: "attached\n", stdout: "attached\n"},
			} {
				t.Run(c.name, func(t *testing.T) {
					var stdout, stderr bytes.Buffer
					opts := remotecommand.StreamOptions{Stdout: &stdout, Tty: c.tty}
					if !c.tty {
						opts.Stderr = &stderr
					}
					if c.stdin != "" {
						opts.Stdin = strings.NewReader(c.stdin)
					}
					if c.tty {
						opts.TerminalSizeQueue = &fixedSize{}
					}
					err := newExec(t, cfg, transport, c.url).StreamWithContext(ctx, opts)
					var xe utilexec.ExitError
					switch {
					case c.code != 0:
						if !errors.As(err, &xe) || xe.ExitStatus() != c.code {
							t.Fatalf("err = %v, want exit code %d", err, c.code)
						}
					case err != nil:
						t.Fatal(err)
					}
					if stdout.String() != c.stdout || stderr.String() != c.stderr {
						t.Errorf("stdout %.80q stderr %q, want %.80q %q", stdout.String(), stderr.String(), c.stdout, c.stderr)
					}
				})
			}
		})
	}

	// RBAC: get pods is not exec.
	acfg, _ := aliceMay(t, ctx, s, cfg, "pod-reader", "get")
	for _, transport := range []string{"websocket", "spdy"} {
		t.Run("forbidden over "+transport, func(t *testing.T) {
			var stdout bytes.Buffer
			err := newExec(t, acfg, transport, execURL([]string{"echo", "x"}, false, false)).
				StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout})
			if err == nil || !strings.Contains(err.Error(), "forbidden") && !strings.Contains(err.Error(), "403") {
				t.Fatalf("alice may exec: err = %v, stdout %q", err, stdout.String())
			}
		})
	}
}

// aliceMay gives alice a role with verbs on pods in default (none of their
// subresources) and returns her client once the role is in force.
func aliceMay(t *testing.T, ctx context.Context, s *system, cfg *rest.Config, role string, verbs ...string) (*rest.Config, *kubernetes.Clientset) {
	t.Helper()
	r := &corev1.Role{Metadata: &corev1.ObjectMeta{Name: role, Namespace: "default"}, Rules: []*corev1.PolicyRule{
		{ApiGroups: []string{""}, Resources: []string{"pods"}, Verbs: verbs}}}
	if _, err := s.store.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.Create(ctx, &corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Name: "alice-" + role, Namespace: "default"},
		RoleRef:  &corev1.RoleRef{Kind: auth.KindRole, Name: role, ApiGroup: auth.RBACGroup},
		Subjects: []*corev1.Subject{{Kind: auth.SubjectUser, Name: "alice"}}}); err != nil {
		t.Fatal(err)
	}
	acfg := rest.CopyConfig(cfg)
	acfg.BearerToken = aliceToken
	acs, err := kubernetes.NewForConfig(acfg)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := acs.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{}); err == nil {
			return acfg, acs
		} else if time.Now().After(deadline) {
			t.Fatalf("alice may not get the pod: %v", err)
		}
	}
}
