package linux

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// serveGRPC serves srv on a loopback port until the test ends and returns
// the port.
func serveGRPC(t *testing.T, srv *grpc.Server) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return ln.Addr().(*net.TCPAddr).Port
}

// TestGRPCProbeResults: grpcProbe against real gRPC servers on loopback
// gives kubelet's results and messages, for the server's overall health
// and for a named service.
func TestGRPCProbeResults(t *testing.T) {
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	port := serveGRPC(t, srv)
	bare := serveGRPC(t, grpc.NewServer()) // no health service

	// A port nothing listens on: a listener closed at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		port    int
		service string
		ok      bool
		msg     string
	}{
		{"serving", port, "", true, "service healthy"},
		{"not serving", port, "db", false, `service unhealthy (responded with "NOT_SERVING")`},
		{"unknown service", port, "nope", false, "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"},
		{"no health service", bare, "", false, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): unknown service grpc.health.v1.Health"},
		{"nothing listening", closed, "", false, `timeout: failed to connect service "127.0.0.1:` + strconv.Itoa(closed) + `" within 200ms: context deadline exceeded`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := grpcProbe(ctx, "127.0.0.1", tc.port, tc.service, 200*time.Millisecond)
			if res.OK != tc.ok || res.Message != tc.msg {
				t.Errorf("grpcProbe = %+v, want OK=%v %q", res, tc.ok, tc.msg)
			}
		})
	}

	// A server going NOT_SERVING turns the probe around.
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if res := grpcProbe(ctx, "127.0.0.1", port, "", time.Second); res.OK || !strings.Contains(res.Message, "NOT_SERVING") {
		t.Errorf("after NOT_SERVING: %+v", res)
	}
}
