package supervisor

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The test binary doubles as the child process: with SUPERVISOR_CHILD set it
// behaves as that mode says instead of running tests.
func TestMain(m *testing.M) {
	switch os.Getenv("SUPERVISOR_CHILD") {
	case "sleep":
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		markReady()
		<-sig
		os.Exit(0)
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		markReady()
		time.Sleep(time.Hour)
		os.Exit(0)
	case "":
		goleak.VerifyTestMain(m)
	default:
		os.Exit(3)
	}
}

// markReady tells the test that the child's signal handling is in place.
func markReady() {
	if f := os.Getenv("SUPERVISOR_READY"); f != "" {
		_ = os.WriteFile(f, nil, 0o644)
	}
}

func waitReady(t *testing.T, file string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(file); err == nil {
			return
		}
	}
	t.Fatalf("child never became ready (%s)", file)
}

type recorder struct {
	mu     sync.Mutex
	events []Event
	ch     chan Event
}

func newRecorder() *recorder { return &recorder{ch: make(chan Event, 100)} }

func (r *recorder) on(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	r.ch <- e
}

func (r *recorder) wait(t *testing.T, kind EventKind, name string) Event {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case e := <-r.ch:
			if e.Kind == kind && e.Name == name {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s event for %q", kind, name)
		}
	}
}

func start(t *testing.T, cfg Config) (*Supervisor, *recorder, context.CancelFunc, chan struct{}) {
	t.Helper()
	rec := newRecorder()
	cfg.OnEvent = rec.on
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, rec, cancel, done
}

func spec(name, mode string) Spec {
	exe, _ := os.Executable()
	return Spec{Name: name, Role: "test", Path: exe, Env: []string{"SUPERVISOR_CHILD=" + mode}}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestRestartAfterKill(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MinBackoff = 10 * time.Millisecond
	s, rec, _, _ := start(t, cfg)
	if err := s.Start(spec("a", "sleep")); err != nil {
		t.Fatal(err)
	}
	first := rec.wait(t, EventStarted, "a")
	killed := time.Now()
	if _, err := s.Signal("a", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exit := rec.wait(t, EventExited, "a")
	if exit.PID != first.PID {
		t.Fatalf("exit of pid %d, want %d", exit.PID, first.PID)
	}
	// The events say when, and that a signal ended it (the console's
	// timeline marks the kill there).
	if exit.Signal != "killed" || exit.Time.Before(killed) || exit.Time.After(time.Now()) || first.Time.After(killed) {
		t.Fatalf("exit: signal %q at %s (killed at %s, started at %s)", exit.Signal, exit.Time, killed, first.Time)
	}
	second := rec.wait(t, EventStarted, "a")
	if second.PID == first.PID || second.Restarts != 1 || second.Time.Before(exit.Time) {
		t.Fatalf("restart: pid %d (first %d), restarts %d at %s", second.PID, first.PID, second.Restarts, second.Time)
	}
	if got := s.List(); len(got) != 1 || got[0].PID != second.PID {
		t.Fatalf("List() = %+v", got)
	}
}

func TestStopIsFinal(t *testing.T) {
	s, rec, _, _ := start(t, DefaultConfig())
	ready := filepath.Join(t.TempDir(), "ready")
	sp := spec("b", "sleep")
	sp.Env = append(sp.Env, "SUPERVISOR_READY="+ready)
	if err := s.Start(sp); err != nil {
		t.Fatal(err)
	}
	st := rec.wait(t, EventStarted, "b")
	waitReady(t, ready)
	if err := s.Stop("b"); err != nil {
		t.Fatal(err)
	}
	if e := rec.wait(t, EventStopped, "b"); e.ExitCode != 0 || e.Signal != "" {
		t.Fatalf("graceful stop exit code %d, want 0", e.ExitCode)
	}
	if alive(st.PID) {
		t.Fatalf("pid %d still alive after Stop", st.PID)
	}
	if err := s.Stop("b"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("second Stop: %v, want ErrUnknown", err)
	}
	if err := s.Start(spec("b", "sleep")); err != nil {
		t.Fatalf("start again after stop: %v", err)
	}
	if err := s.Start(spec("b", "sleep")); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate Start: %v, want ErrExists", err)
	}
}

func TestShutdownKillsStubbornChild(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StopGrace = 200 * time.Millisecond
	s, rec, cancel, done := start(t, cfg)
	ready := filepath.Join(t.TempDir(), "ready")
	sp := spec("c", "ignore-term")
	sp.Env = append(sp.Env, "SUPERVISOR_READY="+ready)
	if err := s.Start(sp); err != nil {
		t.Fatal(err)
	}
	st := rec.wait(t, EventStarted, "c")
	waitReady(t, ready)
	cancel()
	<-done
	if alive(st.PID) {
		t.Fatalf("pid %d survived shutdown", st.PID)
	}
	if err := s.Start(spec("d", "sleep")); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after shutdown: %v, want ErrStopped", err)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := DefaultConfig()
	bad.MaxBackoff = bad.MinBackoff / 2
	if bad.Validate() == nil {
		t.Fatal("inverted backoff range accepted")
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}
