package linux

import (
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/linux/cgroups"
)

func TestRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration, cpu uint64) sample {
		return sample{at: t0.Add(d), u: cgroups.Usage{CPUNanos: cpu}}
	}
	for _, tc := range []struct {
		name      string
		prev, cur sample
		want      uint64
		ok        bool
	}{
		{"half a core", at(0, 1e9), at(2*time.Second, 2e9), 5e8, true},
		{"idle", at(0, 7e9), at(10*time.Second, 7e9), 0, true},
		{"no previous reading", sample{}, at(time.Second, 1e9), 0, false},
		{"no interval", at(time.Second, 1e9), at(time.Second, 2e9), 0, false},
		{"counter went back (a recreated cgroup)", at(0, 5e9), at(time.Second, 1e9), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := rate(tc.prev, tc.cur)
			if got != tc.want || ok != tc.ok {
				t.Errorf("rate = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
