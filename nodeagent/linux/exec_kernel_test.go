package linux_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/linux"
	"github.com/podflow/podflow/nodeagent/linux/container"
)

// TestExecIn runs kubectl exec's and port-forward's node side on a real
// pod: streams, only this node's pods, a connection to the pod's loopback,
// and the end of the command when its pod goes.
func TestExecIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	pd := newPod(e.cfg.NodeName, "web", "sh", "-c", "while true; do echo hello from the pod | nc -l -p 8080 127.0.0.1; done")
	pd.Spec.Containers[0].Env = nil
	e.startPod(t, ctx, pd)
	target := linux.ExecTarget{Namespace: "default", Pod: "web", UID: pd.GetMetadata().GetUid()}
	t.Run("streams", func(t *testing.T) {
		var out, errb bytes.Buffer
		code, err := e.rt.ExecIn(ctx, target, []string{"sh", "-c", "hostname; tr a-z A-Z; echo oops >&2; exit 4"},
			container.Stdio{Stdin: strings.NewReader("from stdin\n"), Stdout: &out, Stderr: &errb})
		if err != nil || code != 4 {
			t.Fatalf("ExecIn = %d, %v", code, err)
		}
		if out.String() != "web\nFROM STDIN\n" || errb.String() != "oops\n" {
			t.Errorf("stdout %q stderr %q", out.String(), errb.String())
		}
	})
	t.Run("not on this node", func(t *testing.T) {
		for _, tt := range []linux.ExecTarget{
			{Namespace: "default", Pod: "db"},
			{Namespace: "other", Pod: "web"},
			{Namespace: "default", Pod: "web", UID: "another-uid"},
			{Namespace: "default", Pod: "web", Container: "sidecar"},
		} {
			if _, err := e.rt.ExecIn(ctx, tt, []string{"true"}, container.Stdio{}); !errors.Is(err, linux.ErrNoContainer) {
				t.Errorf("%+v: err = %v, want ErrNoContainer", tt, err)
			}
		}
	})
	t.Run("dial the pod's loopback", func(t *testing.T) {
		var c net.Conn
		eventually(t, "the pod to listen on 127.0.0.1:8080", func() (bool, string) {
			var err error
			c, err = e.rt.DialPod(ctx, target, 8080)
			return err == nil, fmt.Sprint(err)
		})
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil || string(b) != "hello from the pod\n" {
			t.Fatalf("read %q, %v", b, err)
		}
		if _, err := e.rt.DialPod(ctx, linux.ExecTarget{Namespace: "default", Pod: "db"}, 8080); !errors.Is(err, linux.ErrNoContainer) {
			t.Errorf("dial another node's pod: %v", err)
		}
	})
	t.Run("pod deleted", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			_, err := e.rt.ExecIn(ctx, target, []string{"sleep", "1000"}, container.Stdio{})
			done <- err
		}()
		time.Sleep(300 * time.Millisecond)
		if err := e.rt.StopPodSandbox(ctx, pd.GetMetadata().GetUid()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the exec outlived its pod")
		}
	})
}
