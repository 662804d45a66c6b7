package client_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/client/clienttest"
	"github.com/podflow/podflow/services/pipeline"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, c client.Config) string {
		p := filepath.Join(dir, name)
		if err := client.WriteConfig(p, c); err != nil {
			t.Fatal(err)
		}
		return p
	}
	abs := write("abs.json", client.Config{NATS: "/x/client.json", Token: "tok", DataDir: dir})
	rel := write("rel.json", client.Config{NATS: "nats/client.json", Token: "tok"})
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		path     string
		env      map[string]string
		wantNATS string
		wantErr  bool
	}{
		{name: "absolute bus file kept", path: abs, wantNATS: "/x/client.json"},
		{name: "relative bus file beside the config", path: rel, wantNATS: filepath.Join(dir, "nats/client.json")},
		{name: "PODFLOW_NATS_CONFIG overrides", path: abs, env: map[string]string{client.NATSConfigEnv: "/role.json"}, wantNATS: "/role.json"},
		{name: "PODFLOW_CONFIG without a path", env: map[string]string{client.ConfigEnv: abs}, wantNATS: "/x/client.json"},
		{name: "explicit path missing", path: filepath.Join(dir, "none.json"), wantErr: true},
		{name: "not JSON", path: bad, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(client.ConfigEnv, "")
			t.Setenv(client.NATSConfigEnv, "")
			t.Setenv("HOME", t.TempDir())
			t.Chdir(t.TempDir())
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := client.LoadConfig(tc.path)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("LoadConfig(%q) = %+v, want an error", tc.path, c)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.NATS != tc.wantNATS || c.Token != "tok" {
				t.Fatalf("LoadConfig(%q) = %+v, want NATS %q and token tok", tc.path, c, tc.wantNATS)
			}
		})
	}
}

func TestLoadConfigNoneFound(t *testing.T) {
	t.Setenv(client.ConfigEnv, "")
	t.Setenv("HOME", t.TempDir())
	t.Chdir(t.TempDir())
	if _, err := client.LoadConfig(""); err == nil {
		t.Fatal("LoadConfig found a configuration in an empty directory")
	}
}

func TestStoreClientConfig(t *testing.T) {
	for _, tc := range []struct{ busUser, storeUser string }{
		{bus.RoleAdmin, ""},
		{pipeline.StageRole(pipeline.Scheduler), pipeline.StageRole(pipeline.Scheduler)},
	} {
		t.Run(tc.busUser, func(t *testing.T) {
			if got := client.StoreClientConfig(tc.busUser).User; got != tc.storeUser {
				t.Fatalf("store user of bus user %q = %q, want %q", tc.busUser, got, tc.storeUser)
			}
		})
	}
}

func TestToken(t *testing.T) {
	s := client.New(client.Config{Token: "admin"}, nil, nil)
	if got := s.Token(""); got != "admin" {
		t.Fatalf("Token(\"\") = %q, want the configuration's", got)
	}
	if got := s.Token("mine"); got != "mine" {
		t.Fatalf("Token(mine) = %q", got)
	}
}

// TestOpen connects to an embedded NATS server through a written
// configuration, the way every client command does.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	path := clienttest.Config(t, dir, client.Config{Token: "tok", DataDir: dir})
	sess, err := client.Open(context.Background(), path, "client-test")
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if sess.Bus.Name() != "client-test" || sess.Config.DataDir != dir || sess.Store == nil {
		t.Fatalf("session %q %+v", sess.Bus.Name(), sess.Config)
	}
	if !sess.Bus.NATS().IsConnected() {
		t.Fatal("not connected")
	}
}

// closedPortConfig writes a client configuration whose bus is a loopback
// port nothing listens on.
func closedPortConfig(t *testing.T) (path, url string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url = "nats://" + l.Addr().String()
	l.Close()
	dir := t.TempDir()
	if err := bus.WriteClientConfig(filepath.Join(dir, "client.json"), []string{url}, bus.UserCredential{User: "admin", Password: "x"}); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "config.json")
	if err := client.WriteConfig(path, client.Config{NATS: "client.json", Token: "tok"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(client.NATSConfigEnv, "")
	return path, url
}

// TestOpenCLIUnreachable: with nothing listening a command's session gives
// up within its connect timeout, saying where it looked and what to check.
func TestOpenCLIUnreachable(t *testing.T) {
	path, url := closedPortConfig(t)
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{
		{"default", 0},
		{"one second", time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := client.DefaultCLI()
			if tc.timeout > 0 {
				o.ConnectTimeout = tc.timeout
			}
			start := time.Now()
			sess, err := client.OpenCLI(context.Background(), path, "cli-test", o)
			took := time.Since(start)
			if err == nil {
				sess.Close()
				t.Fatal("OpenCLI connected to a closed port")
			}
			want := "cannot reach podflow at " + url + ": is `podflow up` running?"
			if err.Error() != want || !errors.Is(err, client.ErrUnreachable) {
				t.Fatalf("error %q, want %q (ErrUnreachable)", err, want)
			}
			if took > o.ConnectTimeout+time.Second {
				t.Fatalf("gave up after %s, want within %s", took, o.ConnectTimeout)
			}
		})
	}
}

func TestOpenCLICancelled(t *testing.T) {
	path, _ := closedPortConfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := client.OpenCLI(ctx, path, "cli-test", client.DefaultCLI())
	if err == nil || errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("cancelled OpenCLI: %v, want the cancellation, not unreachable", err)
	}
}

func TestParseRequestTimeout(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: "0", want: 0},
		{in: "5", want: 5 * time.Second},
		{in: "1500ms", want: 1500 * time.Millisecond},
		{in: "2m", want: 2 * time.Minute},
		{in: "-1", wantErr: true},
		{in: "-1s", wantErr: true},
		{in: "soon", wantErr: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := client.ParseRequestTimeout(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ParseRequestTimeout(%q) = %s, %v; want %s, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestRequestContext(t *testing.T) {
	s := client.New(client.Config{}, nil, nil)
	ctx, cancel := s.RequestContext(context.Background(), time.Hour)
	defer cancel()
	if d, _ := ctx.Deadline(); time.Until(d) < 59*time.Minute {
		t.Fatalf("default deadline in %s, want the default 1h", time.Until(d))
	}
	s.RequestTimeout = time.Second
	ctx2, cancel2 := s.RequestContext(context.Background(), time.Hour)
	defer cancel2()
	if d, _ := ctx2.Deadline(); time.Until(d) > time.Second {
		t.Fatalf("deadline in %s, want RequestTimeout 1s", time.Until(d))
	}
	parent, cancel3 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel3()
	ctx3, cancel4 := s.RequestContext(parent, time.Hour)
	defer cancel4()
	if ctx3 != parent {
		t.Fatal("a caller's deadline was replaced")
	}
}
