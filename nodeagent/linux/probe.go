package linux

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

// probeTransport is shared by httpGet probes; probes never reuse
// connections (as kubelet: each probe is a fresh connection).
var probeTransport = &http.Transport{
	DisableKeepAlives: true,
	TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // kubelet skips verification for HTTPS probes
	Proxy:             nil,
}

// Probe implements nodeagent.Runtime: exec runs the command in the
// container (success = exit 0), httpGet and tcpSocket connect from the node
// to the pod IP (httpGet success = a status in 200..399), grpc asks the
// pod IP's grpc.health.v1 service as kubelet does (see grpcProbe). Each is bounded
// by timeoutSeconds (default 1).
func (r *Runtime) Probe(ctx context.Context, pd *corev1.Pod, c *corev1.Container, id nodeagent.ContainerID, _ nodeagent.ProbeKind, pr *corev1.Probe) (nodeagent.ProbeResult, error) {
	timeout := time.Duration(max(pr.GetTimeoutSeconds(), 1)) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p := r.pod(pd.GetMetadata().GetUid())
	if p == nil {
		return nodeagent.ProbeResult{}, nodeagent.Errorf(nodeagent.CodeNotFound, "pod %q has no sandbox", pd.GetMetadata().GetUid())
	}
	switch {
	case pr.GetExec() != nil:
		r.mu.Lock()
		h := p.ctrs[id]
		r.mu.Unlock()
		if h == nil {
			return nodeagent.ProbeResult{}, nodeagent.Errorf(nodeagent.CodeNotFound, "no container %q", id)
		}
		res, err := h.c.Exec(ctx, pr.GetExec().GetCommand(), h.meta.Env, h.meta.WorkingDir)
		if ctx.Err() != nil {
			return nodeagent.ProbeResult{Message: fmt.Sprintf("command timed out after %s", timeout)}, nil
		}
		if err != nil {
			return nodeagent.ProbeResult{}, err
		}
		return nodeagent.ProbeResult{OK: res.ExitCode == 0, Message: strings.TrimSpace(string(res.Output))}, nil
	case pr.GetHttpGet() != nil:
		g := pr.GetHttpGet()
		port, err := resolvePort(g.GetPort(), c)
		if err != nil {
			return nodeagent.ProbeResult{}, err
		}
		host := g.GetHost()
		if host == "" {
			host = p.rec.Net.IP
		}
		scheme := strings.ToLower(g.GetScheme())
		if scheme == "" {
			scheme = "http"
		}
		path := g.GetPath()
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		url := scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + path
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nodeagent.ProbeResult{}, err
		}
		req.Header.Set("User-Agent", "kube-probe/podflow")
		for _, h := range g.GetHttpHeaders() {
			req.Header.Set(h.GetName(), h.GetValue())
		}
		resp, err := (&http.Client{Transport: probeTransport, Timeout: timeout}).Do(req)
		if err != nil {
			return nodeagent.ProbeResult{Message: err.Error()}, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
		resp.Body.Close()
		ok := resp.StatusCode >= 200 && resp.StatusCode < 400
		return nodeagent.ProbeResult{OK: ok, Message: fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)}, nil
	case pr.GetTcpSocket() != nil:
		s := pr.GetTcpSocket()
		port, err := resolvePort(s.GetPort(), c)
		if err != nil {
			return nodeagent.ProbeResult{}, err
		}
		host := s.GetHost()
		if host == "" {
			host = p.rec.Net.IP
		}
		addr := net.JoinHostPort(host, strconv.Itoa(port))
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nodeagent.ProbeResult{Message: fmt.Sprintf("dial tcp %s: %v", addr, err)}, nil
		}
		conn.Close()
		return nodeagent.ProbeResult{OK: true}, nil
	case pr.GetGrpc() != nil:
		g := pr.GetGrpc()
		return grpcProbe(ctx, p.rec.Net.IP, int(g.GetPort()), g.GetService(), timeout), nil
	}
	return nodeagent.ProbeResult{}, fmt.Errorf("linux: probe has no handler (exec, httpGet, tcpSocket or grpc)")
}

// resolvePort returns a numeric port, looking a named one up in the
// container's ports.
func resolvePort(p *corev1.IntOrString, c *corev1.Container) (int, error) {
	if n, ok := p.GetValue().(*corev1.IntOrString_IntVal); ok {
		return int(n.IntVal), nil
	}
	name := p.GetStrVal()
	if n, err := strconv.Atoi(name); err == nil {
		return n, nil
	}
	for _, cp := range c.GetPorts() {
		if cp.GetName() == name {
			return int(cp.GetContainerPort()), nil
		}
	}
	return 0, fmt.Errorf("linux: probe port %q: no such container port", name)
}
