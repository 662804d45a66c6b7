// Package podmetrics is the wire form of the resource usage readings node
// agents answer over NATS request-reply on podflow.ops.metrics.<node>:
// what the Kubernetes API's metrics.k8s.io/v1beta1 (kubectl top) serves,
// as metrics-server serves kubelet's summaries.
//
// A reading is one node's: its own CPU and memory, and each running pod's
// containers'. CPU is a rate (nanocores over Window), memory the working
// set in bytes. Callers:
//
//  1. The api stage asks each node with Ask, under a deadline, and skips a
//     node that does not answer (as metrics-server skips an unreachable
//     kubelet).
//  2. A node agent answers with Serve, for its node only ("" for a
//     simulated cluster's every node), on its own node's subject, which
//     the bus lets it subscribe (pipeline.NodeAgentRole).
package podmetrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/services/pipeline"
)

// Subject is where node's agent answers metrics requests.
func Subject(node string) string { return pipeline.MetricsPrefix + "." + bus.EncodeToken(node) }

// Usage is a CPU rate and a memory working set.
type Usage struct {
	CPUNanoCores uint64 `json:"cpuNanoCores"`
	MemoryBytes  uint64 `json:"memoryBytes"`
}

// Container is one running container's usage.
type Container struct {
	Name string `json:"name"`
	Usage
}

// Pod is one pod's running containers.
type Pod struct {
	Namespace  string      `json:"namespace"`
	Name       string      `json:"name"`
	Containers []Container `json:"containers"`
}

// Reading is one node's usage and its pods', measured at Timestamp (Unix
// ns) over the WindowNs before it; Error is set when the node could not
// measure.
type Reading struct {
	Node      string `json:"node"`
	Timestamp int64  `json:"timestamp"`
	WindowNs  int64  `json:"windowNs"`
	Usage
	Pods  []Pod  `json:"pods,omitempty"`
	Error string `json:"error,omitempty"`
}

// ErrNode is returned when the node answered with an error.
var ErrNode = errors.New("podmetrics: the node could not measure")

// Ask asks node's agent for its reading.
func Ask(ctx context.Context, nc *nats.Conn, node string) (Reading, error) {
	var rd Reading
	msg, err := pipeline.AskNode(ctx, nc, Subject(node), node, nil)
	if err != nil {
		return rd, fmt.Errorf("podmetrics: ask node %q: %w", node, err)
	}
	if err := json.Unmarshal(msg.Data, &rd); err != nil {
		return rd, fmt.Errorf("podmetrics: decode: %w", err)
	}
	if rd.Error != "" {
		return rd, fmt.Errorf("%w: %s", ErrNode, rd.Error)
	}
	return rd, nil
}

// Serve answers the requests for node ("" for every node: a simulated
// cluster) with measure's reading of the node the subject names, until
// the subscription is unsubscribed.
func Serve(ctx context.Context, nc *nats.Conn, node string, measure func(node string) (Reading, error)) (*nats.Subscription, error) {
	subject := pipeline.MetricsPrefix + ".*"
	if node != "" {
		subject = Subject(node)
	}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		name, err := bus.DecodeToken(strings.TrimPrefix(m.Subject, pipeline.MetricsPrefix+"."))
		rd := Reading{Node: name}
		if err == nil {
			rd, err = measure(name)
		}
		if err != nil {
			rd.Error = err.Error()
		}
		b, err := json.Marshal(rd)
		if err != nil {
			return
		}
		_ = m.Respond(b)
	})
	if err != nil {
		return nil, err
	}
	return sub, bus.Subscribed(ctx, nc, sub)
}
