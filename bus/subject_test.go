package bus

import (
	"errors"
	"strings"
	"testing"

	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

func TestEncodeToken(t *testing.T) {
	tests := []struct {
		given, want string
	}{
		{"", "~"},
		{"default", "default"},
		{"web-0", "web-0"},
		{"web.example.com", "web_example_com"},
		{"a_b", "a~5Fb"},
		{"a b", "a~20b"},
		{"a*b>c", "a~2Ab~3Ec"},
		{"~", "~7E"},
		{"é", "~C3~A9"},
		{"Node.1", "Node_1"},
	}
	for _, tt := range tests {
		t.Run(tt.given, func(t *testing.T) {
			got := EncodeToken(tt.given)
			if got != tt.want {
				t.Fatalf("EncodeToken(%q) = %q, want %q", tt.given, got, tt.want)
			}
			if strings.ContainsAny(got, ".*> \t\r\n") {
				t.Fatalf("EncodeToken(%q) = %q contains a forbidden character", tt.given, got)
			}
			back, err := DecodeToken(got)
			if err != nil || back != tt.given {
				t.Fatalf("DecodeToken(%q) = %q, %v; want %q", got, back, err, tt.given)
			}
		})
	}
}

func TestDecodeTokenRejectsNonCanonical(t *testing.T) {
	for _, tok := range []string{"", "a~", "a~4", "a~4g", "~2E", "~61", "a~5f", "a.b", "a*b", "a b", "~~"} {
		if v, err := DecodeToken(tok); err == nil {
			t.Errorf("DecodeToken(%q) = %q, want error", tok, v)
		} else if !errors.Is(err, ErrInvalid) {
			t.Errorf("DecodeToken(%q) error %v does not match ErrInvalid", tok, err)
		}
	}
}

func TestSubject(t *testing.T) {
	tests := []struct {
		name string
		env  *eventsv1.Envelope
		want string
		info SubjectInfo
	}{
		{
			name: "unbound pod",
			env:  &eventsv1.Envelope{Namespace: "default", PodName: "web.1", Payload: &eventsv1.Envelope_PodRequested{PodRequested: &eventsv1.PodRequested{}}},
			want: "podflow.pod.PodRequested.~.default.web_1",
			info: SubjectInfo{Kind: KindPod, Type: "PodRequested", Namespace: "default", Name: "web.1"},
		},
		{
			name: "addressed to a node",
			env:  &eventsv1.Envelope{Namespace: "kube-system", PodName: "dns", NodeName: "node.a", Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{}}},
			want: "podflow.pod.PodScheduled.node_a.kube-system.dns",
			info: SubjectInfo{Kind: KindPod, Type: "PodScheduled", Node: "node.a", Namespace: "kube-system", Name: "dns"},
		},
		{
			name: "heartbeat",
			env:  &eventsv1.Envelope{NodeName: "n1", Payload: &eventsv1.Envelope_NodeHeartbeat{NodeHeartbeat: &eventsv1.NodeHeartbeat{}}},
			want: "podflow.node.n1.NodeHeartbeat",
			info: SubjectInfo{Kind: KindNode, Type: "NodeHeartbeat", Node: "n1"},
		},
		{
			name: "dead letter",
			env:  &eventsv1.Envelope{Stage: "scheduler", Namespace: "x", Payload: &eventsv1.Envelope_DeadLetter{DeadLetter: &eventsv1.DeadLetter{}}},
			want: "podflow.dlq.scheduler",
			info: SubjectInfo{Kind: KindDeadLetter, Type: "DeadLetter", Stage: "scheduler"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Subject(tt.env)
			if got != tt.want {
				t.Fatalf("Subject = %q, want %q", got, tt.want)
			}
			info, err := ParseSubject(got)
			if err != nil {
				t.Fatalf("ParseSubject(%q): %v", got, err)
			}
			if info != tt.info {
				t.Fatalf("ParseSubject(%q) = %+v, want %+v", got, info, tt.info)
			}
			if info.String() != got {
				t.Fatalf("String() = %q, want %q", info.String(), got)
			}
		})
	}
}

func TestParseSubjectRejects(t *testing.T) {
	for _, s := range []string{
		"", "podflow", "podflow.pod", "nats.pod.A.~.a.b",
		"podflow.pod.PodRequested.~.default",           // too short
		"podflow.pod.PodRequested.~.default.web.extra", // too long
		"podflow.pod.podRequested.~.default.web",       // type must be capitalised
		"podflow.pod.Pod-Requested.~.default.web",
		"podflow.pod.PodRequested..default.web", // empty token
		"podflow.pod.PodRequested.*.default.web",
		"podflow.node.n1", "podflow.node.n1.NodeHeartbeat.x",
		"podflow.dlq", "podflow.dlq.a.b", "podflow.api.create",
	} {
		if _, err := ParseSubject(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseSubject(%q) error = %v, want ErrInvalid", s, err)
		}
	}
}

func TestFilters(t *testing.T) {
	bound := &eventsv1.Envelope{Namespace: "default", PodName: "web", NodeName: "n1.example", Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{}}}
	other := &eventsv1.Envelope{Namespace: "default", PodName: "web", NodeName: "n2", Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{}}}
	unbound := &eventsv1.Envelope{Namespace: "default", PodName: "web", Payload: &eventsv1.Envelope_PodPersisted{PodPersisted: &eventsv1.PodPersisted{}}}
	hb := &eventsv1.Envelope{NodeName: "n1.example", Payload: &eventsv1.Envelope_NodeHeartbeat{NodeHeartbeat: &eventsv1.NodeHeartbeat{}}}
	dl := &eventsv1.Envelope{Stage: "api", Payload: &eventsv1.Envelope_DeadLetter{DeadLetter: &eventsv1.DeadLetter{}}}

	tests := []struct {
		filter string
		match  []*eventsv1.Envelope
		miss   []*eventsv1.Envelope
	}{
		{TypeFilter("PodScheduled"), []*eventsv1.Envelope{bound, other}, []*eventsv1.Envelope{unbound, hb, dl}},
		{NodeFilter("n1.example"), []*eventsv1.Envelope{bound}, []*eventsv1.Envelope{other, unbound, hb, dl}},
		{TypeNodeFilter("PodScheduled", "n1.example"), []*eventsv1.Envelope{bound}, []*eventsv1.Envelope{other, unbound, hb}},
		{TypeNodeFilter("NodeHeartbeat", "n1.example"), []*eventsv1.Envelope{hb}, []*eventsv1.Envelope{bound}},
		{TypeFilter("NodeHeartbeat"), []*eventsv1.Envelope{hb}, []*eventsv1.Envelope{bound, unbound}},
		{NodeEventsFilter("n1.example"), []*eventsv1.Envelope{hb}, []*eventsv1.Envelope{bound}},
		{PodFilter("default", "web"), []*eventsv1.Envelope{bound, other, unbound}, []*eventsv1.Envelope{hb, dl}},
		{TypeFilter("DeadLetter"), []*eventsv1.Envelope{dl}, []*eventsv1.Envelope{bound, hb}},
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			for _, e := range tt.match {
				if s := Subject(e); !subjectsOverlap(s, tt.filter) {
					t.Errorf("%q does not match %q", s, tt.filter)
				}
			}
			for _, e := range tt.miss {
				if s := Subject(e); subjectsOverlap(s, tt.filter) {
					t.Errorf("%q matches %q", s, tt.filter)
				}
			}
		})
	}
}

func TestSubjectsOverlap(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"podflow.pod.>", "podflow.api.>", false},
		{"podflow.>", "podflow.api.>", true},
		{">", "podflow.store.>", true},
		{"podflow.*.x", "podflow.api.>", true},
		{"podflow.api", "podflow.api.>", false},
		{"a.b", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.>", "a", false},
	}
	for _, tt := range tests {
		if got := subjectsOverlap(tt.a, tt.b); got != tt.want {
			t.Errorf("subjectsOverlap(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := subjectsOverlap(tt.b, tt.a); got != tt.want {
			t.Errorf("subjectsOverlap(%q, %q) = %v, want %v", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestDefaultStreamsAvoidReservedPrefixes(t *testing.T) {
	topo := Topology{Streams: DefaultStreams(DefaultStreamsConfig())}
	if err := topo.Validate(); err != nil {
		t.Fatalf("default topology invalid: %v", err)
	}
	bad := Topology{Streams: []StreamSpec{{Name: "ALL", Subjects: []string{"podflow.>"}}}}
	if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("stream capturing podflow.> validated: %v", err)
	}
}
