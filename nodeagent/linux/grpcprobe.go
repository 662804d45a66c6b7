package linux

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/podflow/podflow/nodeagent"
)

// grpcProbe is kubelet's gRPC prober (pkg/probe/grpc): one
// grpc.health.v1.Health/Check of service to host:port over plaintext,
// on a fresh connection, all within timeout. It succeeds when the server
// answers SERVING; the failure messages are kubelet's.
func grpcProbe(ctx context.Context, host string, port int, service string, timeout time.Duration) nodeagent.ProbeResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithUserAgent("kube-probe/podflow"),
		grpc.WithTransportCredentials(insecure.NewCredentials()), // kubelet supports no credentials
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		return nodeagent.ProbeResult{Message: fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err)}
	}
	defer conn.Close()
	// As kubelet's grpc.WithBlock dial: connect first, so that a server
	// that does not answer is "failed to connect", not an RPC error.
	if err := waitReady(ctx, conn); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nodeagent.ProbeResult{Message: fmt.Sprintf("timeout: failed to connect service %q within %v: %+v", addr, timeout, err)}
		}
		return nodeagent.ProbeResult{Message: fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err)}
	}
	resp, err := healthpb.NewHealthClient(conn).Check(metadata.NewOutgoingContext(ctx, metadata.MD{}),
		&healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		if st, ok := status.FromError(err); ok {
			switch st.Code() {
			case codes.Unimplemented:
				return nodeagent.ProbeResult{Message: "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): " + st.Message()}
			case codes.DeadlineExceeded:
				return nodeagent.ProbeResult{Message: fmt.Sprintf("timeout: health rpc did not complete within %v", timeout)}
			}
		}
		return nodeagent.ProbeResult{Message: fmt.Sprintf("error: health rpc probe failed: %+v", err)}
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return nodeagent.ProbeResult{Message: fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String())}
	}
	return nodeagent.ProbeResult{OK: true, Message: "service healthy"}
}

// waitReady connects conn and waits until it is ready or ctx ends (the
// connection's last error then, or ctx's).
func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Shutdown:
			return errors.New("connection shut down")
		}
		if !conn.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}
