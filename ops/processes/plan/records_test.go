package plan_test

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/ops/processes/supervisor"
)

func TestRecordsRoundTripAndVictims(t *testing.T) {
	kids := []supervisor.Child{
		{Spec: supervisor.Spec{Name: "nats", Role: "nats"}, PID: 10},
		{Spec: supervisor.Spec{Name: "store-1", Role: "store"}, PID: 11, Restarts: 2},
		{Spec: supervisor.Spec{Name: "scheduler-1", Role: "stage/scheduler"}, PID: 12},
		{Spec: supervisor.Spec{Name: "api-1", Role: "stage/api"}, PID: 0}, // restarting
		{Spec: supervisor.Spec{Name: "nodeagent-sim", Role: "nodeagent"}, PID: 14},
	}
	path := filepath.Join(t.TempDir(), "children.json")
	if err := plan.WriteRecords(path, plan.Records(kids)); err != nil {
		t.Fatal(err)
	}
	recs, err := plan.ReadRecords(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 || recs[1] != (plan.Record{Name: "store-1", Role: "store", PID: 11, Restarts: 2}) {
		t.Fatalf("records %+v", recs)
	}
	for _, tc := range []struct {
		targets []string
		want    []string
	}{
		{[]string{"stages"}, []string{"scheduler-1"}},
		{[]string{"store", "nats"}, []string{"nats", "store-1"}},
		{[]string{"nodeagent"}, []string{"nodeagent-sim"}},
	} {
		kinds := map[plan.Kind]bool{}
		for _, t2 := range tc.targets {
			k, ok := plan.TargetKind(t2)
			if !ok {
				t.Fatalf("target %q unknown", t2)
			}
			kinds[k] = true
		}
		pool, err := plan.Victims(recs, kinds)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range pool {
			got = append(got, r.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("victims of %v: %v, want %v", tc.targets, got, tc.want)
		}
	}
	if _, err := plan.Victims(recs[3:4], map[plan.Kind]bool{plan.StageKind: true}); !errors.Is(err, plan.ErrNoVictim) {
		t.Errorf("no running target: %v", err)
	}
	if _, ok := plan.TargetKind("kubelet"); ok {
		t.Error("unknown target accepted")
	}
}
