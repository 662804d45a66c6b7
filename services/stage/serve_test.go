package stage_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/services/stage"
)

// TestServeAnswersABurstLargerThanItsWorkers: a burst of requests many
// times the workers (and their queue) is answered in full, the later
// requests after the earlier ones, none dropped. A node agent's projected
// token requests come this way: hundreds at once to a handful of workers.
func TestServeAnswersABurstLargerThanItsWorkers(t *testing.T) {
	srv := bustest.Server(t)
	served := bustest.Connect(t, srv, "server")
	asker := bustest.Connect(t, srv, "asker")
	ctx, cancel := context.WithCancel(context.Background())
	var g errgroup.Group
	t.Cleanup(func() { cancel(); _ = g.Wait() })

	const workers, burst = 2, 300
	release := make(chan struct{})
	err := stage.Serve(ctx, &g, served.NATS(), "test.serve", "q", workers, func(ctx context.Context, m *nats.Msg) {
		<-release // every worker busy until the whole burst was sent
		_ = m.Respond(m.Data)
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
			defer rcancel()
			want := fmt.Sprint(i)
			m, err := asker.NATS().RequestWithContext(rctx, "test.serve", []byte(want))
			switch {
			case err != nil:
				errs <- fmt.Errorf("request %d: %w", i, err)
			case string(m.Data) != want:
				errs <- fmt.Errorf("request %d: answered %q", i, m.Data)
			}
		}()
	}
	// Every request has reached the server's client before a worker frees.
	deadline := time.Now().Add(10 * time.Second)
	for {
		sz, err := srv.Server().Varz(nil)
		if err != nil {
			t.Fatal(err)
		}
		if sz.InMsgs >= burst || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Errorf("%d of %d requests not answered", n, burst)
	}
}
