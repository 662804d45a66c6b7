package apiserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	"k8s.io/client-go/tools/portforward"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/nodelogs"
)

// wsMessage is one WebSocket message: its channel (the first byte, for
// the channel protocols) and data, base64-decoded for the base64 ones.
type wsMessage struct {
	channel byte
	data    []byte
}

// wsSession dials path (a GET) over WebSocket offering protocol ("" for
// none) as the admin and reads every message until the server closes.
func wsSession(t *testing.T, s *system, path, protocol string, channels bool) ([]wsMessage, string) {
	t.Helper()
	cfg, err := websocket.NewConfig(strings.Replace(s.url, "https://", "wss://", 1)+path, s.url)
	if err != nil {
		t.Fatal(err)
	}
	if protocol != "" {
		cfg.Protocol = []string{protocol}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca.CertPEM)
	cfg.TlsConfig = &tls.Config{RootCAs: pool}
	cfg.Header = http.Header{"Authorization": {"Bearer " + adminToken}}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatalf("dial %s with %q: %v", path, protocol, err)
	}
	defer ws.Close()
	_ = ws.SetDeadline(time.Now().Add(20 * time.Second))
	negotiated := ws.Config().Protocol
	got := ""
	if len(negotiated) > 0 {
		got = negotiated[0]
	}
	var out []wsMessage
	base64ed := strings.Contains(protocol, "base64")
	for {
		var b []byte
		if err := websocket.Message.Receive(ws, &b); err != nil {
			return out, got
		}
		m := wsMessage{}
		if channels && len(b) > 0 {
			m.channel, b = b[0], b[1:]
			if base64ed { // the channel as an ASCII digit, the data base64
				m.channel -= '0'
				if b, err = base64.StdEncoding.DecodeString(string(b)); err != nil {
					t.Fatalf("not base64: %q", b)
				}
			}
		} else if base64ed && len(b) > 0 {
			if b, err = base64.StdEncoding.DecodeString(string(b)); err != nil {
				t.Fatalf("not base64: %q", b)
			}
		}
		m.data = b
		out = append(out, m)
	}
}

func byChannel(ms []wsMessage) map[byte]string {
	out := map[byte]string{}
	for _, m := range ms {
		out[m.channel] += string(m.data)
	}
	return out
}

// TestExecWebSocketProtocols: exec over every WebSocket subprotocol
// kube-apiserver accepts — v5 and v4 (binary and base64; the status as
// JSON on the error channel) and the older channel.k8s.io,
// base64.channel.k8s.io and none (the failure's message only) — with
// wsstream's framing (a channel byte; base64 text for the base64 ones).
func TestExecWebSocketProtocols(t *testing.T) {
	t.Parallel()
	s, _, _ := startExecSystem(t)
	exec := func(cmd ...string) string {
		q := "?container=c&stdout=true&stderr=true"
		for _, c := range cmd {
			q += "&command=" + c
		}
		return "/api/v1/namespaces/default/pods/web/exec" + q
	}
	for _, proto := range []string{"v5.channel.k8s.io", "v4.channel.k8s.io", "v4.base64.channel.k8s.io", "channel.k8s.io", "base64.channel.k8s.io", ""} {
		t.Run("protocol "+proto, func(t *testing.T) {
			ms, negotiated := wsSession(t, s, exec("echo", "hi"), proto, true)
			if negotiated != proto {
				t.Errorf("negotiated %q, want %q", negotiated, proto)
			}
			ch := byChannel(ms)
			if ch[1] != "hi\n" || ch[2] != "to stderr\n" {
				t.Errorf("stdout %q stderr %q", ch[1], ch[2])
			}
			v4 := strings.HasPrefix(proto, "v4") || strings.HasPrefix(proto, "v5")
			switch {
			case v4 && !strings.Contains(ch[3], `"status":"Success"`):
				t.Errorf("error channel %q, want a JSON Success status", ch[3])
			case !v4 && ch[3] != "":
				t.Errorf("error channel %q, want nothing on success", ch[3])
			}

			ms, _ = wsSession(t, s, exec("exit", "7"), proto, true)
			status := byChannel(ms)[3]
			if v4 {
				var st struct {
					Reason  string `json:"reason"`
					Details struct {
						Causes []struct{ Type, Message string } `json:"causes"`
					} `json:"details"`
				}
				if err := json.Unmarshal([]byte(status), &st); err != nil || st.Reason != "NonZeroExitCode" || len(st.Details.Causes) != 1 || st.Details.Causes[0].Message != "7" {
					t.Errorf("exit 7's status %q", status)
				}
			} else if !strings.HasPrefix(status, "command terminated with non-zero exit code") {
				t.Errorf("exit 7's message %q", status)
			}
		})
	}
}

// TestLogsWebSocket: pods/log requested over WebSocket switches protocols
// (101) and streams the log as kube-apiserver does: an empty message
// first, then the text in binary messages (binary.k8s.io, or no
// subprotocol) or base64 text messages (base64.binary.k8s.io).
func TestLogsWebSocket(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	ctx := context.Background()
	if _, err := s.store.Create(ctx, &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "small", Uid: "u-small"},
		Spec: &corev1.PodSpec{NodeName: "n1", Containers: []*corev1.Container{{Name: "app", Image: "busybox"}}}}); err != nil {
		t.Fatal(err)
	}
	node := &fakeNodeLog{lines: 3, lineLen: 20}
	sub, err := nodelogs.Serve(ctx, s.conn.NATS(), "n1", node.read)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	want := ""
	for i := range node.lines {
		rec := node.record(i)
		want += rec[strings.Index(rec, " F ")+3:]
	}
	for _, proto := range []string{"base64.binary.k8s.io", "binary.k8s.io", ""} {
		t.Run("protocol "+proto, func(t *testing.T) {
			ms, negotiated := wsSession(t, s, "/api/v1/namespaces/default/pods/small/log", proto, false)
			if negotiated != proto {
				t.Errorf("negotiated %q, want %q", negotiated, proto)
			}
			if len(ms) < 2 || len(ms[0].data) != 0 {
				t.Fatalf("messages %v, want an empty one first", ms)
			}
			got := ""
			for _, m := range ms[1:] {
				got += string(m.data)
			}
			if got != want {
				t.Errorf("log %q, want %q", got, want)
			}
		})
	}
}

// TestPortForwardWebSocket: port-forward over WebSocket — SPDY tunneled
// through it (client-go's NewSPDYOverWebsocketDialer, kubectl ≥ 1.31's
// default, with no fallback to plain SPDY) and the kubelet's channel
// protocol (v4.channel.k8s.io: the port on each channel first, then the
// data) — to the fake node, which echoes port 80.
func TestPortForwardWebSocket(t *testing.T) {
	s, cfg, cs := startExecSystem(t)
	t.Run("SPDY tunneled through WebSocket", func(t *testing.T) {
		u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("web").SubResource("portforward").URL()
		dialer, err := portforward.NewSPDYOverWebsocketDialer(u, cfg)
		if err != nil {
			t.Fatal(err)
		}
		stop, ready := make(chan struct{}), make(chan struct{})
		pf, err := portforward.New(dialer, []string{"0:80"}, stop, ready, io.Discard, io.Discard)
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
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		msg := strings.Repeat("tunnel ", 10000)
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		if got, err := io.ReadAll(c); err != nil || string(got) != msg {
			t.Fatalf("echo through the tunnel: %.40q, %v", got, err)
		}
	})
	t.Run("v4.channel.k8s.io", func(t *testing.T) {
		wcfg, err := websocket.NewConfig(strings.Replace(s.url, "https://", "wss://", 1)+"/api/v1/namespaces/default/pods/web/portforward?ports=80", s.url)
		if err != nil {
			t.Fatal(err)
		}
		wcfg.Protocol = []string{"v4.channel.k8s.io"}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(s.ca.CertPEM)
		wcfg.TlsConfig = &tls.Config{RootCAs: pool}
		wcfg.Header = http.Header{"Authorization": {"Bearer " + adminToken}}
		ws, err := websocket.DialConfig(wcfg)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		_ = ws.SetDeadline(time.Now().Add(10 * time.Second))
		for range 2 { // channel 0 (data) and 1 (error) announce the port
			var b []byte
			if err := websocket.Message.Receive(ws, &b); err != nil {
				t.Fatal(err)
			}
			if len(b) != 3 || b[1] != 80 || b[2] != 0 {
				t.Fatalf("port announcement %v, want [ch 80 0]", b)
			}
		}
		if err := websocket.Message.Send(ws, append([]byte{0}, "ping"...)); err != nil {
			t.Fatal(err)
		}
		var got []byte
		for len(got) < 4 {
			var b []byte
			if err := websocket.Message.Receive(ws, &b); err != nil {
				t.Fatal(err)
			}
			if len(b) > 0 && b[0] == 0 {
				got = append(got, b[1:]...)
			}
		}
		if string(got) != "ping" {
			t.Fatalf("echo %q", got)
		}
		// The session ends once the client closes: the node sees stdin end.
		ws.Close()
		deadline := time.Now().Add(10 * time.Second)
		for nodeSessions.Load() > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the node's session outlived the WebSocket")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
