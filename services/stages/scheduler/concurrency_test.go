package scheduler

import (
	"fmt"
	"sync"
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/framework"
)

// TestConcurrentUse runs cycles from several goroutines over one shared
// snapshot, each with its own Scheduler, while others feed the cache and
// take their own snapshots. Run with -race.
func TestConcurrentUse(t *testing.T) {
	c := uniformCluster(t, nodeNames("n", 200))
	shared := c.Snapshot()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 3 {
		wg.Go(func() {
			s := newTestScheduler(t, func(cfg *Config) { cfg.Seed = uint64(g + 1) })
			for i := range 200 {
				if _, err := s.Schedule(mkPod(fmt.Sprintf("r%d-%d", g, i), "100m", "10Mi"), shared); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for g := range 2 {
		wg.Go(func() {
			own := framework.NewSnapshot()
			for i := range 200 {
				pod := mkPod(fmt.Sprintf("w%d-%d", g, i), "10m", "1Mi")
				if err := c.AssumePod(pod, fmt.Sprintf("n%04d", i%200)); err != nil {
					errs <- err
					return
				}
				c.UpdateSnapshot(own)
				if i%2 == 0 {
					if err := c.ForgetPod(pod); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := c.NumPods(); got != 200 {
		t.Errorf("cache holds %d pods, want 200", got)
	}
	if n, _ := shared.Get("n0000"); n.NumPods() != 0 {
		t.Errorf("the shared snapshot changed under its readers: %d pods on n0000", n.NumPods())
	}
}
