package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/processes/up"
	"github.com/podflow/podflow/raftstore"
)

// clockTicks is the kernel's USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat (100 on every Linux architecture podflow runs on).
const clockTicks = 100

// costSample is what the system has counted at one instant: the CPU time
// of every process podflow runs, the NATS server's stream and consumer
// counters, and every store replica's status counters.
type costSample struct {
	cpu       map[int]procCPU               // by PID
	streams   map[string]uint64             // stream -> last sequence
	consumers map[string]consumerCount      // stream/consumer -> counts
	replicas  map[string]raftstore.Counters // replica ID -> counters
}

type procCPU struct {
	name, role string
	ms         float64
	mem        memory
}

// memory is what /proc/<pid>/status says a process holds, in bytes.
type memory struct {
	rss, hwm uint64 // resident set and its peak (VmRSS, VmHWM)
	anon     uint64 // the resident set's anonymous part (RssAnon)
}

type consumerCount struct{ delivered, ackFloor uint64 }

// listProcs lists the processes whose CPU the bench reports: those of
// children.json (what `podflow up` runs), up itself, and the bench.
func listProcs(p up.Procs) []plan.Record {
	var recs []plan.Record
	if p.ChildrenFile != "" {
		recs, _ = plan.ReadRecords(p.ChildrenFile)
	}
	if p.UpPID > 0 {
		recs = append(recs, plan.Record{Name: "up", Role: "up", PID: p.UpPID})
	}
	return append(recs, plan.Record{Name: "bench", Role: "bench (the load, not in the total)", PID: os.Getpid()})
}

// readMemory returns the resident set of pid, its peak and its anonymous
// part, from /proc/<pid>/status; zeros when pid is gone.
func readMemory(pid int) (m memory) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "kB" {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			m.rss = v << 10
		case "VmHWM:":
			m.hwm = v << 10
		case "RssAnon:":
			m.anon = v << 10
		}
	}
	return m
}

// readCPU returns the user+system CPU time of pid in milliseconds.
func readCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields counted from 3 start after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b)[i+1:])
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseUint(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return float64(utime+stime) * 1000 / clockTicks, nil
}

func takeCostSample(ctx context.Context, sess *client.Session, ps up.Procs) (*costSample, error) {
	s := &costSample{cpu: map[int]procCPU{}, streams: map[string]uint64{}, consumers: map[string]consumerCount{}, replicas: map[string]raftstore.Counters{}}
	for _, r := range listProcs(ps) {
		if r.PID <= 0 {
			continue
		}
		if ms, err := readCPU(r.PID); err == nil {
			s.cpu[r.PID] = procCPU{name: r.Name, role: r.Role, ms: ms, mem: readMemory(r.PID)}
		}
	}
	js := sess.Bus.JetStream()
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		st, err := js.Stream(ctx, n)
		if err != nil {
			return nil, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return nil, err
		}
		s.streams[n] = info.State.LastSeq
		lister := st.ListConsumers(ctx)
		for ci := range lister.Info() {
			if ci.Config.Durable == "" {
				continue // ordered consumers, the bench's own among them
			}
			s.consumers[n+"/"+ci.Name] = consumerCount{delivered: ci.Delivered.Consumer, ackFloor: ci.AckFloor.Consumer}
		}
		if err := lister.Err(); err != nil {
			return nil, err
		}
	}
	if err := names.Err(); err != nil {
		return nil, err
	}
	sts, err := sess.Store.Client().Status(ctx, 500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	for _, st := range sts {
		s.replicas[st.ID] = st.Counters
	}
	return s, nil
}

// quiesce waits, up to timeout, until no durable consumer has messages
// pending or unacknowledged, so the counts include the work each pod
// caused after it was Running (PodReady, endpoints, ...).
func quiesce(ctx context.Context, sess *client.Session, timeout time.Duration) bool {
	js := sess.Bus.JetStream()
	deadline := time.Now().Add(timeout)
	for {
		busy := false
		names := js.StreamNames(ctx)
		for n := range names.Name() {
			st, err := js.Stream(ctx, n)
			if err != nil {
				busy = true
				continue
			}
			lister := st.ListConsumers(ctx)
			for ci := range lister.Info() {
				if ci.Config.Durable != "" && (ci.NumPending > 0 || ci.NumAckPending > 0) {
					busy = true
				}
			}
		}
		if !busy {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CostReport is the cost model of one bench run: what the system counted
// between the first request and the end, in all and per pod.
type CostReport struct {
	Pods      int           `json:"pods"`
	Quiesced  bool          `json:"quiesced"` // every consumer drained before the end sample
	Processes []ProcessCost `json:"processes"`
	TotalCPU  float64       `json:"totalCpuMs"` // of every process but the bench
	// MinEventsPerPod is the fewest distinct lifecycle event types one pod
	// of the run had in the stream as messages of their own (the steps a
	// node's PodStatusReport carries are not counted).
	MinEventsPerPod int                `json:"minEventsPerPod"`
	Messages        uint64             `json:"messages"` // stored in every stream
	StreamMessages  map[string]uint64  `json:"streamMessages"`
	Deliveries      uint64             `json:"deliveries"` // by durable consumers, redeliveries included
	Acks            uint64             `json:"acks"`       // the consumers' ack floors' advance
	Store           raftstore.Counters `json:"store"`      // summed over the replicas
	// LogEntries is the raft log's growth (the most any replica wrote);
	// Store.LogAppends counts every replica's appends (fsyncs).
	LogEntries uint64 `json:"logEntries"`
}

// StoreRequests is every request the replicas served.
func (c *CostReport) StoreRequests() uint64 {
	return c.Store.WriteRequests + c.Store.ReadRequests + c.Store.StaleReadRequests + c.Store.WatchRequests
}

// ProcessCost is one process's CPU time over the run and its memory.
type ProcessCost struct {
	Name  string  `json:"name"`
	Role  string  `json:"role"`
	PID   int     `json:"pid"`
	CPUms float64 `json:"cpuMs"`
	// RSSBefore and RSSAfter are its resident set before the first
	// request and at the end; PeakRSS the most it ever held (VmHWM), all
	// in bytes.
	RSSBefore uint64 `json:"rssBefore"`
	RSSAfter  uint64 `json:"rssAfter"`
	PeakRSS   uint64 `json:"peakRss"`
	// AnonBefore and AnonAfter are the anonymous part of the resident
	// set (RssAnon: heap, stacks), without the pages of the binary it
	// maps. Those vary with the page cache, not with the work: a freshly
	// built binary's processes map 30–60 MB more of it than the same
	// binary's once it has been run a while.
	AnonBefore uint64 `json:"anonBefore"`
	AnonAfter  uint64 `json:"anonAfter"`
}

// RSSGrowthPerPod is what the process's resident set grew by over the run,
// per pod the run stored, in bytes.
func (p ProcessCost) RSSGrowthPerPod(pods int) float64 {
	return (float64(p.RSSAfter) - float64(p.RSSBefore)) / float64(max(pods, 1))
}

// AnonGrowthPerPod is RSSGrowthPerPod of the anonymous part alone.
func (p ProcessCost) AnonGrowthPerPod(pods int) float64 {
	return (float64(p.AnonAfter) - float64(p.AnonBefore)) / float64(max(pods, 1))
}

// since returns the counts of s less those of before. A replica restarted
// in between counts from its restart; a process restarted is left out (its
// PID changed).
func (s *costSample) since(before *costSample, pods, minEvents int, quiesced bool) *CostReport {
	r := &CostReport{Pods: pods, Quiesced: quiesced, MinEventsPerPod: minEvents, StreamMessages: map[string]uint64{}}
	for pid, c := range s.cpu {
		b, ok := before.cpu[pid]
		if !ok || b.name != c.name {
			continue
		}
		r.Processes = append(r.Processes, ProcessCost{Name: c.name, Role: c.role, PID: pid, CPUms: c.ms - b.ms,
			RSSBefore: b.mem.rss, RSSAfter: c.mem.rss, PeakRSS: c.mem.hwm, AnonBefore: b.mem.anon, AnonAfter: c.mem.anon})
		if c.name != "bench" {
			r.TotalCPU += c.ms - b.ms
		}
	}
	sort.Slice(r.Processes, func(i, j int) bool { return r.Processes[i].CPUms > r.Processes[j].CPUms })
	delta := func(a, b uint64) uint64 {
		if a < b {
			return a // reset in between
		}
		return a - b
	}
	for n, last := range s.streams {
		d := delta(last, before.streams[n])
		r.StreamMessages[n] = d
		r.Messages += d
	}
	for n, c := range s.consumers {
		b := before.consumers[n]
		r.Deliveries += delta(c.delivered, b.delivered)
		r.Acks += delta(c.ackFloor, b.ackFloor)
	}
	for id, c := range s.replicas {
		b := before.replicas[id]
		if c.WriteRequests < b.WriteRequests || c.LogEntriesWritten < b.LogEntriesWritten {
			b = raftstore.Counters{} // restarted in between
		}
		r.Store.WriteRequests += c.WriteRequests - b.WriteRequests
		r.Store.ReadRequests += delta(c.ReadRequests, b.ReadRequests)
		r.Store.StaleReadRequests += delta(c.StaleReadRequests, b.StaleReadRequests)
		r.Store.WatchRequests += delta(c.WatchRequests, b.WatchRequests)
		r.Store.WatchEventsSent += delta(c.WatchEventsSent, b.WatchEventsSent)
		r.Store.LogAppends += delta(c.LogAppends, b.LogAppends)
		entries := c.LogEntriesWritten - b.LogEntriesWritten
		r.Store.LogEntriesWritten += entries
		r.LogEntries = max(r.LogEntries, entries)
	}
	return r
}

// print writes the cost table.
func (r *CostReport) print(out io.Writer) {
	per := func(v float64) string { return fmt.Sprintf("%.2f", v/float64(max(r.Pods, 1))) }
	fmt.Fprintf(out, "\ncost per pod (%d pods; counted by the kernel, the NATS server and the store replicas", r.Pods)
	if !r.Quiesced {
		fmt.Fprint(out, "; the consumers had not drained at the end")
	}
	fmt.Fprintln(out, ")")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "process\trole\tCPU ms\tCPU ms/pod\t")
	for _, p := range r.Processes {
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t\n", p.Name, p.Role, p.CPUms, per(p.CPUms))
	}
	fmt.Fprintf(tw, "total\t\t%.0f\t%s\t\n", r.TotalCPU, per(r.TotalCPU))
	tw.Flush()
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "counted\ttotal\tper pod\t")
	row := func(name string, v uint64) { fmt.Fprintf(tw, "%s\t%d\t%s\t\n", name, v, per(float64(v))) }
	row("JetStream messages stored", r.Messages)
	row("JetStream deliveries", r.Deliveries)
	row("JetStream acks", r.Acks)
	row("store requests", r.StoreRequests())
	row("  writes", r.Store.WriteRequests)
	row("  linearizable reads", r.Store.ReadRequests)
	row("  stale reads", r.Store.StaleReadRequests)
	row("  watch starts", r.Store.WatchRequests)
	row("raft log entries", r.LogEntries)
	row("raft log fsyncs (all replicas)", r.Store.LogAppends)
	row("watch events delivered", r.Store.WatchEventsSent)
	tw.Flush()
	r.printMemory(out)
}

// printMemory writes each process's memory: its resident set at the end,
// its peak, and its growth over the run per pod the run stored (what the
// process keeps per pod it caches, with the garbage GOGC lets it hold),
// then the same of its anonymous part alone (AnonBefore says why).
func (r *CostReport) printMemory(out io.Writer) {
	procs := slices.Clone(r.Processes)
	sort.Slice(procs, func(i, j int) bool { return procs[i].RSSAfter > procs[j].RSSAfter })
	fmt.Fprintf(out, "\nmemory (resident set, from /proc/<pid>/status; per pod: its growth over the run / %d pods)\n", r.Pods)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "process\tMiB before\tMiB after\tpeak MiB\tKB/pod\tanon MiB after\tanon KB/pod\t")
	var total, peak, anon uint64
	for _, p := range procs {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.1f\t%.0f\t%.1f\t\n", p.Name, mib(p.RSSBefore), mib(p.RSSAfter), mib(p.PeakRSS),
			p.RSSGrowthPerPod(r.Pods)/1000, mib(p.AnonAfter), p.AnonGrowthPerPod(r.Pods)/1000)
		if p.Name != "bench" {
			total, peak, anon = total+p.RSSAfter, peak+p.PeakRSS, anon+p.AnonAfter
		}
	}
	fmt.Fprintf(tw, "total\t\t%.0f\t%.0f\t\t%.0f\t\t\n", mib(total), mib(peak), mib(anon))
	tw.Flush()
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func (r *CostReport) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
