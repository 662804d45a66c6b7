package apiserver

// Port-forward over WebSocket, as kube-apiserver and the kubelet serve it
// besides SPDY: the kubelet's channel protocol (v4.channel.k8s.io,
// v4.base64.channel.k8s.io or none; the ports in ?ports=, a data and an
// error channel per port), and SPDY tunneled through WebSocket
// (SPDY/3.1+portforward.k8s.io: kubectl ≥ 1.31's default, whose binary
// messages carry the SPDY connection's bytes).

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strings"

	gwebsocket "github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	clientportforward "k8s.io/client-go/tools/portforward"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/podflow/podflow/proto/corev1"
)

// spdyTunnelPrefix prefixes a SPDY protocol tunneled through WebSocket.
const spdyTunnelPrefix = portforward.WebsocketsSPDYTunnelingPrefix

// servePortForwardWebSocket serves a WebSocket port-forward request: the
// SPDY tunnel, or the kubelet's channel protocol.
func (s *Server) servePortForwardWebSocket(w http.ResponseWriter, r *http.Request, pf portForwarder, pod *corev1.Pod) {
	name, uid := pod.GetMetadata().GetName(), pod.GetMetadata().GetUid()
	if !wsstream.IsWebSocketRequestWithTunnelingProtocol(r) {
		// PodPortForwardOptions' ports= (kube-apiserver's parameter; it
		// hands the kubelet port=, which is read when ports= is absent).
		var opts *portforward.V4Options
		var err error
		if vs := r.URL.Query()["ports"]; len(vs) > 0 {
			q := r.URL.Query()
			q.Del("ports")
			q["port"] = vs
			r2 := r.Clone(r.Context())
			r2.URL.RawQuery = q.Encode()
			opts, err = portforward.NewV4Options(r2)
		} else {
			opts, err = portforward.NewV4Options(r)
		}
		if err != nil {
			writeStatus(w, badRequest("%v", err))
			return
		}
		portforward.ServePortForward(w, r, pf, name, uid, opts, streamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, portforward.SupportedProtocols)
		return
	}
	var spdyProtocol string
	for _, p := range gwebsocket.Subprotocols(r) {
		if rest, ok := strings.CutPrefix(p, spdyTunnelPrefix); ok && rest == portforward.ProtocolV1Name {
			spdyProtocol = rest
			break
		}
	}
	if spdyProtocol == "" {
		writeStatus(w, badRequest("unable to upgrade: no tunneling spdy protocols provided"))
		return
	}
	up := gwebsocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }, Subprotocols: []string{spdyTunnelPrefix + spdyProtocol}}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered the client
	}
	tunnel := quietClose{clientportforward.NewTunnelingConnection("server", ws)}
	// The SPDY server runs over the tunnel as over a hijacked HTTP
	// connection: the WebSocket handshake was the upgrade. Once it has
	// the tunnel, the SPDY connection closes it.
	tw := &tunnelWriter{conn: tunnel, header: http.Header{}}
	defer func() {
		if !tw.hijacked {
			_ = tunnel.Close()
		}
	}()
	spdyReq := r.Clone(r.Context())
	spdyReq.Method = http.MethodPost
	spdyReq.Header = http.Header{}
	spdyReq.Header.Set("Connection", "Upgrade")
	spdyReq.Header.Set("Upgrade", "SPDY/3.1")
	spdyReq.Header.Set("X-Stream-Protocol-Version", spdyProtocol)
	portforward.ServePortForward(tw, spdyReq, pf, name, uid, nil,
		streamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, portforward.SupportedProtocols)
}

// tunnelWriter is the ResponseWriter the SPDY upgrade runs on inside a
// WebSocket tunnel: its response line is not sent (the WebSocket
// handshake answered), and Hijack hands over the tunnel.
type tunnelWriter struct {
	conn     net.Conn
	header   http.Header
	hijacked bool
}

func (t *tunnelWriter) Header() http.Header { return t.header }
func (t *tunnelWriter) WriteHeader(int)     {}
func (t *tunnelWriter) Write([]byte) (int, error) {
	return 0, errors.New("apiserver: no response body in a SPDY tunnel")
}

func (t *tunnelWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if t.hijacked {
		return nil, nil, http.ErrHijacked
	}
	t.hijacked = true
	return t.conn, bufio.NewReadWriter(bufio.NewReader(t.conn), bufio.NewWriter(t.conn)), nil
}

// quietClose closes a tunnel without an error when the peer has gone
// already (its close message cannot be sent): the SPDY connection would
// otherwise hold a goroutine for a second to report it to nobody.
type quietClose struct{ net.Conn }

func (q quietClose) Close() error {
	_ = q.Conn.Close()
	return nil
}
