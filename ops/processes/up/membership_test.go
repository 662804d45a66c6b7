package up

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestWantVoters: an odd number of voters, at most five (etcd's and
// Nomad's advice): a second, fourth and sixth server are non-voters.
func TestWantVoters(t *testing.T) {
	for servers, want := range map[int]int{0: 0, 1: 1, 2: 1, 3: 3, 4: 3, 5: 5, 6: 5, 9: 5} {
		if got := WantVoters(servers); got != want {
			t.Errorf("WantVoters(%d) = %d, want %d", servers, got, want)
		}
	}
}

// TestPlanMembership: a new server joins as a non-voter; non-voters are
// promoted in joining order while voters are fewer than WantVoters.
func TestPlanMembership(t *testing.T) {
	for _, tc := range []struct {
		name      string
		config    map[string]string
		answering []string
		add, prom []string
	}{
		{"alone", map[string]string{"h1": "Voter"}, []string{"h1"}, nil, nil},
		{"second joins", map[string]string{"h1": "Voter"}, []string{"h1", "h2"}, []string{"h2"}, nil},
		{"second stays a non-voter", map[string]string{"h1": "Voter", "h2": "Nonvoter"}, []string{"h1", "h2"}, nil, nil},
		{"third makes three voters", map[string]string{"h1": "Voter", "h2": "Nonvoter", "h3": "Nonvoter"}, []string{"h1", "h2", "h3"}, nil, []string{"h2", "h3"}},
		{"third joins", map[string]string{"h1": "Voter", "h2": "Nonvoter"}, []string{"h1", "h2", "h3"}, []string{"h3"}, []string{"h2"}},
		{"fourth is a non-voter", map[string]string{"h1": "Voter", "h2": "Voter", "h3": "Voter"}, []string{"h1", "h2", "h3", "h4"}, []string{"h4"}, nil},
		{"fifth makes five", map[string]string{"h1": "Voter", "h2": "Voter", "h3": "Voter", "h4": "Nonvoter", "h5": "Nonvoter"},
			[]string{"h1", "h2", "h3", "h4", "h5"}, nil, []string{"h4", "h5"}},
		{"a voter down changes nothing", map[string]string{"h1": "Voter", "h2": "Voter", "h3": "Voter"}, []string{"h1", "h2"}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := PlanMembership(tc.config, tc.answering)
			if !slices.Equal(m.AddNonvoters, tc.add) || !slices.Equal(m.Promote, tc.prom) {
				t.Fatalf("PlanMembership = add %v promote %v; want %v, %v", m.AddNonvoters, m.Promote, tc.add, tc.prom)
			}
		})
	}
}

// TestMetaGroupNotCurrent: the seed is retired only when every server
// leads the JetStream meta group or is current with its leader (the
// leader's JSZ answer, as nats-server encodes it).
func TestMetaGroupNotCurrent(t *testing.T) {
	for _, tc := range []struct {
		name, jsz string
		want      []string
	}{
		{"all current", `{"leader":"h1-seed","replicas":[{"name":"h1","current":true},{"name":"h2","current":true},{"name":"h3","current":true}]}`, nil},
		{"leader among the servers", `{"leader":"h2","replicas":[{"name":"h1","current":true},{"name":"h1-seed","current":true},{"name":"h3","current":true}]}`, nil},
		{"one behind", `{"leader":"h1","replicas":[{"name":"h1-seed","current":true},{"name":"h2","current":true},{"name":"h3","current":false}]}`, []string{"h3"}},
		{"one offline", `{"leader":"h1","replicas":[{"name":"h2","current":true,"offline":true},{"name":"h3","current":true}]}`, []string{"h2"}},
		{"one unknown", `{"leader":"h1","replicas":[{"name":"h1-seed","current":true},{"name":"h2","current":true}]}`, []string{"h3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m metaGroup
			if err := json.Unmarshal([]byte(tc.jsz), &m); err != nil {
				t.Fatal(err)
			}
			if got := m.notCurrent([]string{"h1", "h2", "h3"}); !slices.Equal(got, tc.want) {
				t.Errorf("notCurrent = %v, want %v", got, tc.want)
			}
		})
	}
}
