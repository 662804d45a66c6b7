// Command bench-peer runs podflow's bench pipeline and a Kubernetes control
// plane of the same release podflow serves (3 fsynced etcd members,
// kube-apiserver, kube-scheduler) with KWOK playing the nodes, one after the
// other on this machine with the same pods on the same number of nodes, and
// prints both, the ratio and each side's CPU per pod. `make bench-peer`
// builds the peer from the module proxy into .tools/peer and runs it.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

type options struct {
	Podflow string
	Runs    int
	Peer    peerOptions
	// PeerOnly skips podflow's run (to try the peer alone).
	PeerOnly bool
}

func main() {
	var o options
	o.Peer.Progress = os.Stderr
	fs := flag.NewFlagSet("bench-peer", flag.ContinueOnError)
	fs.StringVar(&o.Podflow, "podflow", "bin/podflow", "podflow binary")
	fs.StringVar(&o.Peer.Tools, "tools", ".tools/peer", "directory of kube-apiserver, kube-scheduler, etcd and kwok")
	fs.IntVar(&o.Peer.Pods, "pods", 3000, "pods each side runs")
	fs.IntVar(&o.Peer.Nodes, "nodes", 100, "nodes each side has (podflow's simulated, the peer's KWOK)")
	fs.IntVar(&o.Peer.Rate, "rate", 2000, "offered creates per second, each side")
	fs.IntVar(&o.Peer.Workers, "workers", 64, "the peer's creates in flight")
	fs.IntVar(&o.Peer.Members, "etcd-members", 3, "etcd members of the peer")
	fs.IntVar(&o.Runs, "runs", 3, "runs of each side, alternating")
	fs.DurationVar(&o.Peer.Timeout, "timeout", 10*time.Minute, "give up on one side's run after this long")
	fs.BoolVar(&o.Peer.Keep, "keep", false, "keep the peer's temporary directory (logs, certificates, etcd data)")
	fs.BoolVar(&o.PeerOnly, "peer-only", false, "run only the peer")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-peer:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := benchmark(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-peer:", err)
		stop()
		os.Exit(1)
	}
}

func (o options) validate() error {
	var errs []error
	for name, v := range map[string]int{"--pods": o.Peer.Pods, "--nodes": o.Peer.Nodes, "--rate": o.Peer.Rate,
		"--workers": o.Peer.Workers, "--etcd-members": o.Peer.Members, "--runs": o.Runs} {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s %d: must be positive", name, v))
		}
	}
	if o.Peer.Pods > 110*o.Peer.Nodes {
		errs = append(errs, fmt.Errorf("--pods %d: more than %d nodes of 110 pods hold", o.Peer.Pods, o.Peer.Nodes))
	}
	tools := []string{"etcd", "kube-apiserver", "kube-scheduler", "kwok"}
	if !o.PeerOnly {
		tools = append(tools, "")
	}
	for _, t := range tools {
		path := filepath.Join(o.Peer.Tools, t)
		if t == "" {
			path = o.Podflow
		}
		if _, err := os.Stat(path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w (make peer-tools builds the peer)", path, err))
		}
	}
	return errors.Join(errs...)
}

func benchmark(ctx context.Context, o options, out io.Writer) error {
	var runs []run
	for i := range o.Runs {
		var r run
		r.Load[0] = loadAvg()
		if !o.PeerOnly {
			fmt.Fprintf(o.Peer.Progress, "== run %d/%d: podflow\n", i+1, o.Runs)
			pf, err := runPodflow(ctx, o)
			if err != nil {
				return fmt.Errorf("podflow, run %d: %w", i+1, err)
			}
			r.Podflow = pf
		}
		fmt.Fprintf(o.Peer.Progress, "== run %d/%d: the peer\n", i+1, o.Runs)
		peer, err := runPeer(ctx, o.Peer)
		if err != nil {
			return fmt.Errorf("peer, run %d: %w", i+1, err)
		}
		r.Peer = peer
		r.Load[1] = loadAvg()
		printRun(out, i+1, r)
		runs = append(runs, r)
	}
	printSummary(out, o, runs)
	return nil
}

// runPodflow runs podflow's bench pipeline with its own fresh system.
func runPodflow(ctx context.Context, o options) (side, error) {
	dir, err := os.MkdirTemp("", "podflow-peer-pf-")
	if err != nil {
		return side{}, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, o.Peer.Timeout)
	defer cancel()
	costJSON := filepath.Join(dir, "cost.json")
	cmd := exec.CommandContext(ctx, o.Podflow, podflowArgs(o.Peer.Pods, o.Peer.Nodes, o.Peer.Rate, costJSON)...)
	// podflow bench stops its own system on SIGINT.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	var buf bytes.Buffer
	cmd.Stdout = io.MultiWriter(&buf, o.Peer.Progress)
	cmd.Stderr = o.Peer.Progress
	if err := cmd.Run(); err != nil {
		return side{}, fmt.Errorf("%s %s: %w", o.Podflow, strings.Join(cmd.Args[1:], " "), err)
	}
	b, err := os.ReadFile(costJSON)
	if err != nil {
		return side{}, err
	}
	return parsePodflow(&buf, b)
}

func printRun(out io.Writer, n int, r run) {
	speed, cpu := r.ratio()
	fmt.Fprintf(out, "run %d (load %.1f → %.1f)\n", n, r.Load[0], r.Load[1])
	printSide(out, "podflow", r.Podflow)
	printSide(out, "peer", r.Peer)
	if r.Podflow.Pods > 0 {
		fmt.Fprintf(out, "  %-8s %.1f× the pods/s, %.1f× less CPU per pod\n", "ratio", speed, cpu)
	}
}

func printSide(out io.Writer, name string, s side) {
	if s.Pods == 0 {
		return
	}
	fmt.Fprintf(out, "  %-8s %7.1f pods/s  p50 %-9s p99 %-9s %6.2f CPU ms/pod  (%s)\n", name, s.PodsPerSec,
		s.P50.Round(time.Millisecond), s.P99.Round(time.Millisecond), s.cpuPerPod(), byProcess(s))
}

// byProcess is each process's CPU ms per pod, largest first.
func byProcess(s side) string {
	names := make([]string, 0, len(s.ByProcess))
	for n := range s.ByProcess {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := s.ByProcess[b] - s.ByProcess[a]; c != 0 {
			if c > 0 {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f", n, s.ByProcess[n]/float64(s.Pods)))
	}
	return strings.Join(parts, ", ")
}

func printSummary(out io.Writer, o options, runs []run) {
	col := func(f func(run) float64) float64 {
		var xs []float64
		for _, r := range runs {
			xs = append(xs, f(r))
		}
		return median(xs)
	}
	fmt.Fprintf(out, "medians of %d runs (%d pods, %d nodes, %d/s offered):\n", len(runs), o.Peer.Pods, o.Peer.Nodes, o.Peer.Rate)
	if !o.PeerOnly {
		fmt.Fprintf(out, "  podflow  %7.1f pods/s  %6.2f CPU ms/pod\n", col(func(r run) float64 { return r.Podflow.PodsPerSec }), col(func(r run) float64 { return r.Podflow.cpuPerPod() }))
	}
	fmt.Fprintf(out, "  peer     %7.1f pods/s  %6.2f CPU ms/pod\n", col(func(r run) float64 { return r.Peer.PodsPerSec }), col(func(r run) float64 { return r.Peer.cpuPerPod() }))
	if !o.PeerOnly {
		fmt.Fprintf(out, "  ratio    %.1f× the pods/s, %.1f× less CPU per pod\n",
			col(func(r run) float64 { s, _ := r.ratio(); return s }), col(func(r run) float64 { _, c := r.ratio(); return c }))
	}
}
