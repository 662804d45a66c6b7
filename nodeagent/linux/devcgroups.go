package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/podflow/podflow/nodeagent/linux/container"
)

// Device cgroups (cgroup v1 "podflow-dev-<container id>") are made and
// removed by each container's shim. A shim that was SIGKILLed, or whose
// container left a process the kernel could not take down in time, leaves
// its cgroup behind. So the runtime keeps a ledger of the containers it
// starts, an empty file per container id under <DataDir>/device-cgroups,
// written before the start and dropped once the cgroup is gone, and
// sweeps it for the containers it no longer runs: when it starts, and
// every deviceCgroupGCPeriod, as often as kubelet's container garbage
// collection. Only its own ledger: other agents on the host and their
// containers' cgroups are never touched.

// deviceCgroupGCPeriod is how often the ledger is swept (kubelet's
// ContainerGCPeriod).
const deviceCgroupGCPeriod = time.Minute

func (r *Runtime) deviceCgroupLedger() string { return filepath.Join(r.cfg.DataDir, "device-cgroups") }

// noteDeviceCgroup records container id in the ledger; the caller marks
// it starting (r.starting) first, so no sweep takes its cgroup before the
// container is registered.
func (r *Runtime) noteDeviceCgroup(id string) error {
	if err := os.MkdirAll(r.deviceCgroupLedger(), 0o700); err != nil {
		return fmt.Errorf("device cgroup ledger: %w", err)
	}
	if err := os.WriteFile(filepath.Join(r.deviceCgroupLedger(), id), nil, 0o600); err != nil {
		return fmt.Errorf("device cgroup ledger: %w", err)
	}
	return nil
}

// releaseDeviceCgroup removes the device cgroup of container id, which
// no longer runs, and then its ledger entry. A cgroup the kernel still
// holds stays in the ledger for the next sweep.
func (r *Runtime) releaseDeviceCgroup(id string) error {
	if err := container.RemoveDeviceCgroup(id); err != nil {
		return fmt.Errorf("device cgroup of container %q: %w", id, err)
	}
	if err := os.Remove(filepath.Join(r.deviceCgroupLedger(), id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("device cgroup ledger: %w", err)
	}
	return nil
}

// sweepDeviceCgroups releases the device cgroups in the ledger except
// those of containers starting or running.
func (r *Runtime) sweepDeviceCgroups() {
	entries, err := os.ReadDir(r.deviceCgroupLedger())
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.log.Warn("read the device cgroup ledger", "err", err)
		}
		return
	}
	live := map[string]bool{}
	r.mu.Lock()
	for id := range r.starting {
		live[id] = true
	}
	for _, p := range r.pods {
		for id, c := range p.ctrs {
			select {
			case <-c.c.Done(): // its shim has exited
			default:
				live[string(id)] = true
			}
		}
	}
	r.mu.Unlock()
	for _, e := range entries {
		if live[e.Name()] {
			continue
		}
		if err := r.releaseDeviceCgroup(e.Name()); err != nil {
			r.log.Warn("device cgroup left for the next sweep", "container", e.Name(), "err", err)
		}
	}
}

// deviceCgroupGC sweeps the ledger every deviceCgroupGCPeriod until Close.
func (r *Runtime) deviceCgroupGC() {
	defer r.wg.Done()
	t := time.NewTicker(deviceCgroupGCPeriod)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case <-t.C:
			r.sweepDeviceCgroups()
		}
	}
}
