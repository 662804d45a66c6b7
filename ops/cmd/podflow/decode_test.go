package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// TestDecode: a stored event read on stdin prints as one line of JSON
// naming its payload; anything else is refused with a clear error.
func TestDecode(t *testing.T) {
	env := &eventsv1.Envelope{RequestId: "r1", Namespace: "default", PodName: "web", Stage: "scheduler",
		Payload: &eventsv1.Envelope_PodScheduled{PodScheduled: &eventsv1.PodScheduled{NodeName: "sim-node-0001",
			Pod: &corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "web"}}}}}
	b, err := proto.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	root := newRoot()
	root.SetArgs([]string{"decode"})
	var out bytes.Buffer
	root.SetIn(bytes.NewReader(b))
	root.SetOut(&out)
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	if got["podName"] != "web" || got["podScheduled"].(map[string]any)["nodeName"] != "sim-node-0001" {
		t.Fatalf("decoded %v", got)
	}
	root = newRoot()
	root.SetArgs([]string{"decode"})
	root.SetIn(strings.NewReader("hello"))
	root.SetOut(&out)
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "not a podflow event") {
		t.Fatalf("garbage: %v", err)
	}
}
