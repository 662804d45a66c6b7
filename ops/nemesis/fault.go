package nemesis

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Fault is a state of the network as data: the directed links cut, and
// the delay (plus up to Jitter) every link adds to each chunk it relays.
// The zero Fault is a healed network.
type Fault struct {
	Name   string // what it is, for reports: "partition [store-1] | [store-2 store-3]"
	Cut    map[Edge]bool
	Delay  time.Duration
	Jitter time.Duration
	// Loss is the percent of packets dropped on every link; it needs a
	// Net built over a lossy Path (NewVia with a LossyPath).
	Loss int
}

func (f Fault) String() string {
	if f.Name != "" {
		return f.Name
	}
	if len(f.Cut) == 0 && f.Delay == 0 && f.Loss == 0 {
		return "healed"
	}
	var cut []string
	for e := range f.Cut {
		cut = append(cut, e.String())
	}
	sort.Strings(cut)
	return fmt.Sprintf("cut %s, delay %s±%s", strings.Join(cut, " "), f.Delay, f.Jitter)
}

// CutLinks lists the cut links, sorted.
func (f Fault) CutLinks() []Edge {
	var out []Edge
	for e := range f.Cut {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Partition cuts every link between two different groups, both ways;
// links inside a group stay. A node in no group is cut from all of them.
func Partition(nodes []string, groups ...[]string) Fault {
	group := map[string]int{}
	for i, g := range groups {
		for _, n := range g {
			group[n] = i + 1
		}
	}
	f := Fault{Cut: map[Edge]bool{}}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b && (group[a] != group[b] || group[a] == 0) {
				f.Cut[Edge{a, b}] = true
			}
		}
	}
	var parts []string
	for _, g := range groups {
		s := append([]string(nil), g...)
		sort.Strings(s)
		parts = append(parts, "["+strings.Join(s, " ")+"]")
	}
	f.Name = "partition " + strings.Join(parts, " | ")
	return f
}

// Isolate cuts node off from every other node, both ways: with node the
// leader, a lone leader cut off from its followers (the rest keep their
// links and elect another).
func Isolate(nodes []string, node string) Fault {
	var rest []string
	for _, n := range nodes {
		if n != node {
			rest = append(rest, n)
		}
	}
	f := Partition(nodes, []string{node}, rest)
	f.Name = "isolate " + node
	return f
}

// Bridge splits nodes into two sides that cannot reach each other except
// through bridge, which keeps its links to both (Jepsen's bridge).
func Bridge(nodes []string, bridge string, left, right []string) Fault {
	f := Fault{Cut: map[Edge]bool{}}
	side := map[string]int{}
	for _, n := range left {
		side[n] = 1
	}
	for _, n := range right {
		side[n] = 2
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b && a != bridge && b != bridge && side[a] != side[b] {
				f.Cut[Edge{a, b}] = true
			}
		}
	}
	f.Name = fmt.Sprintf("bridge %s between %v and %v", bridge, left, right)
	return f
}

// OneWay cuts only from→to: from's connections to to stop carrying bytes
// (its requests and to's answers on them), while to still reaches from.
func OneWay(from, to string) Fault {
	return Fault{Name: "one-way " + from + "→" + to, Cut: map[Edge]bool{{from, to}: true}}
}

// Slow adds delay plus up to jitter to every link.
func Slow(delay, jitter time.Duration) Fault {
	return Fault{Name: fmt.Sprintf("latency %s±%s", delay, jitter), Delay: delay, Jitter: jitter}
}

// Lose drops percent of the packets on every link (a Net over a Path).
func Lose(percent int) Fault {
	return Fault{Name: fmt.Sprintf("packet loss %d%% on every link", percent), Loss: percent}
}
