package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// side is one system's figures from one run.
type side struct {
	PodsPerSec float64
	P50, P99   time.Duration
	CPUms      float64            // of the system's processes, not the load's
	ByProcess  map[string]float64 // CPU ms of each process
	Pods       int
}

func (s side) cpuPerPod() float64 {
	if s.Pods == 0 {
		return 0
	}
	return s.CPUms / float64(s.Pods)
}

// run is one run: podflow, then the peer, and the load around them.
type run struct {
	Podflow, Peer side
	Load          [2]float64 // 1-minute load average before and after
}

// ratio is podflow's pods/s over the peer's, and the peer's CPU per pod
// over podflow's: how many times podflow is ahead on each.
func (r run) ratio() (speed, cpu float64) {
	if r.Peer.PodsPerSec > 0 {
		speed = r.Podflow.PodsPerSec / r.Peer.PodsPerSec
	}
	if c := r.Podflow.cpuPerPod(); c > 0 {
		cpu = r.Peer.cpuPerPod() / c
	}
	return speed, cpu
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile is the nearest-rank p-th percentile of ds (0 < p ≤ 100), as
// podflow's bench computes its own.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = max(rank, 1)
	return s[min(rank, len(s))-1]
}

// throughput is pods per second from the first create to the last pod seen
// Running.
func throughput(n int, first, last time.Time) float64 {
	d := last.Sub(first).Seconds()
	if n == 0 || d <= 0 {
		return 0
	}
	return float64(n) / d
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times; 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procCPU is the CPU time a process has used (user + system), from the text
// of its /proc/<pid>/stat.
func procCPU(stat string) (time.Duration, error) {
	// The command name, field 2, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat %q: no ')' after the command name", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat %q: %d fields after the command name, want at least 13", stat, len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: CPU time %q: %w", s, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

func readProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return procCPU(string(b))
}

func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

var (
	podsPerSecLine = regexp.MustCompile(`^([0-9.]+) pods/s$`)
	latencyLine    = regexp.MustCompile(`^PodRequested→Running: p50 (\S+)\s+p99 (\S+)`)
)

// parsePodflow reads podflow's bench pipeline output (its pods/s and
// PodRequested→Running lines) and its --cost-json report.
func parsePodflow(out io.Reader, costJSON []byte) (side, error) {
	var s side
	found := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := podsPerSecLine.FindStringSubmatch(line); m != nil {
			v, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				return s, fmt.Errorf("podflow output: %q: %w", line, err)
			}
			s.PodsPerSec = v
			found |= 1
		}
		if m := latencyLine.FindStringSubmatch(line); m != nil {
			p50, err1 := time.ParseDuration(m[1])
			p99, err2 := time.ParseDuration(m[2])
			if err1 != nil || err2 != nil {
				return s, fmt.Errorf("podflow output: %q: latencies are not durations", line)
			}
			s.P50, s.P99 = p50, p99
			found |= 2
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	if found&1 == 0 {
		return s, fmt.Errorf("podflow output: no \"N pods/s\" line")
	}
	if found&2 == 0 {
		return s, fmt.Errorf("podflow output: no \"PodRequested→Running: p50 … p99 …\" line")
	}
	var cost struct {
		Pods      int     `json:"pods"`
		TotalCPU  float64 `json:"totalCpuMs"`
		Processes []struct {
			Name  string  `json:"name"`
			CPUms float64 `json:"cpuMs"`
		} `json:"processes"`
	}
	if err := json.Unmarshal(costJSON, &cost); err != nil {
		return s, fmt.Errorf("podflow cost JSON: %w", err)
	}
	if cost.Pods <= 0 {
		return s, fmt.Errorf("podflow cost JSON: pods %d, want > 0", cost.Pods)
	}
	s.Pods, s.CPUms = cost.Pods, cost.TotalCPU
	s.ByProcess = map[string]float64{}
	for _, p := range cost.Processes {
		if p.Name == "bench" {
			continue // the load, not in podflow's total
		}
		s.ByProcess[p.Name] = p.CPUms
	}
	return s, nil
}
