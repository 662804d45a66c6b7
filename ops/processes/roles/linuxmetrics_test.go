package roles

import (
	"errors"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent/linux"
)

func TestLinuxReading(t *testing.T) {
	if _, err := linuxReading("n1", linux.UsageReading{Time: time.Unix(5, 0)}); !errors.Is(err, errNoReading) {
		t.Fatalf("first sample: err = %v, want errNoReading", err)
	}
	rd := linux.UsageReading{Time: time.Unix(5, 0), Window: 10 * time.Second,
		NodeUsage: linux.NodeUsage{CPUNanoCores: 9, MemoryBytes: 90},
		Pods: []linux.PodUsage{{UID: "u", Namespace: "ns", Name: "p", Containers: []linux.ContainerUsage{
			{Name: "c", NodeUsage: linux.NodeUsage{CPUNanoCores: 7, MemoryBytes: 70}}}}}}
	got, err := linuxReading("n1", rd)
	if err != nil {
		t.Fatal(err)
	}
	c := got.Pods[0].Containers[0]
	if got.Node != "n1" || got.Timestamp != 5e9 || got.WindowNs != 10e9 || got.CPUNanoCores != 9 || got.MemoryBytes != 90 ||
		got.Pods[0].Namespace != "ns" || got.Pods[0].Name != "p" || c.Name != "c" || c.CPUNanoCores != 7 || c.MemoryBytes != 70 {
		t.Errorf("reading = %+v", got)
	}
}
