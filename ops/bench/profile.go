package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"time"
)

// ProfileDirEnv names a directory in which every podflow process started
// with it in its environment (and its children: `podflow up` passes its
// environment on) writes a CPU profile of its whole life, as
// <role>-<pid>.pprof. `podflow bench pipeline --profile-dir` sets it.
const ProfileDirEnv = "PODFLOW_CPUPROFILE_DIR"

// StartProfile starts that profile when the environment asks for one; the
// returned stop writes it out (a process killed with SIGKILL leaves an
// empty file).
func StartProfile(args []string) (stop func()) {
	cpu, heap := startCPUProfile(args), startHeapProfile(args, heapProfileEvery)
	return func() { heap(); cpu() }
}

// HeapProfileDirEnv names a directory in which every podflow process started
// with it in its environment writes, every heapProfileEvery while it runs
// (replacing the last; it writes none when it stops, when it holds nothing
// any more), a heap profile, <role>-<pid>.heap ('go tool pprof
// -sample_index=inuse_space -top FILE'), and the runtime's memory figures,
// <role>-<pid>.memstats. Each write first collects garbage, so the profile
// is what the process holds; that collection also lowers the resident set
// the bench reports: read memory figures from a run without it.
// `podflow bench pipeline --heap-profile-dir` sets it.
const HeapProfileDirEnv = "PODFLOW_HEAPPROFILE_DIR"

const heapProfileEvery = 10 * time.Second

func startHeapProfile(args []string, every time.Duration) (stop func()) {
	dir := os.Getenv(HeapProfileDirEnv)
	if dir == "" {
		return func() {}
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.heap", profileName(args), os.Getpid()))
	write := func() {
		// A heap profile shows the heap as of the last collection: collect
		// now, so that it is what the process holds, not what it held when
		// GOGC last let the collector run.
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		stats := fmt.Sprintf("heap_alloc %d\nheap_inuse %d\nstack_inuse %d\nsys %d\ngoroutines %d\n",
			ms.HeapAlloc, ms.HeapInuse, ms.StackInuse, ms.Sys, runtime.NumGoroutine())
		for _, out := range []struct {
			path  string
			write func(io.Writer) error
		}{
			{path, func(w io.Writer) error { return pprof.Lookup("heap").WriteTo(w, 0) }},
			{strings.TrimSuffix(path, ".heap") + ".memstats", func(w io.Writer) error { _, err := io.WriteString(w, stats); return err }},
		} {
			if err := writeFileAtomic(out.path, out.write); err != nil {
				fmt.Fprintln(os.Stderr, "heap profile:", err)
			}
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				write()
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
}

// writeFileAtomic writes path through a temporary file renamed over it.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	return err
}

func startCPUProfile(args []string) (stop func()) {
	dir := os.Getenv(ProfileDirEnv)
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", profileName(args), os.Getpid())))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpu profile:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "cpu profile:", err)
		f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// profileName is the role of a command line: its leading words up to the
// first flag ("stage-scheduler"), and the replica's or node's name when a
// flag gives it ("stage-scheduler-scheduler-1", "store-store-2").
func profileName(args []string) string {
	var words []string
	for i, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		words = append(words, args[i])
	}
	for i, a := range args[:max(len(args)-1, 0)] {
		switch a {
		case "--replica", "--node", "--server-name", "--name", "--id":
			words = append(words, args[i+1])
		}
	}
	if len(words) == 0 {
		return "podflow"
	}
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, strings.Join(words, "-"))
}
