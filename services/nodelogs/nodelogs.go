// Package nodelogs is the wire form of container logs served by Linux node
// agents over NATS request-reply on podflow.ops.logs.<node>: what
// `podflow logs` and the Kubernetes API's pods/log read.
package nodelogs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/services/pipeline"
)

// Subject is where node's agent answers log requests.
func Subject(node string) string { return pipeline.LogsPrefix + "." + bus.EncodeToken(node) }

// Request asks for a container's log from Offset on.
type Request struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container,omitempty"`
	Previous  bool   `json:"previous,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
}

// Reply is a chunk of a CRI-format log (whole lines) and where the next
// read starts; Error is set when the node could not serve it.
type Reply struct {
	Container string `json:"container"`
	Data      []byte `json:"data"`
	Offset    int64  `json:"offset"`
	Running   bool   `json:"running"`
	Error     string `json:"error,omitempty"`
}

// ErrNode is returned when the node answered with an error.
var ErrNode = errors.New("nodelogs: the node could not serve the log")

// Ask makes one log request to node's agent.
func Ask(ctx context.Context, nc *nats.Conn, node string, req Request) (Reply, error) {
	var rep Reply
	b, err := json.Marshal(req)
	if err != nil {
		return rep, err
	}
	msg, err := nc.RequestWithContext(ctx, Subject(node), b)
	if err != nil {
		return rep, fmt.Errorf("nodelogs: ask node %q: %w", node, err)
	}
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return rep, fmt.Errorf("nodelogs: decode: %w", err)
	}
	if rep.Error != "" {
		return rep, fmt.Errorf("%w: %s", ErrNode, rep.Error)
	}
	return rep, nil
}

// Fetch reads the whole current log of a container from its node.
func Fetch(ctx context.Context, nc *nats.Conn, node string, req Request) ([]byte, error) {
	var out []byte
	for range 1024 { // bounded: 1024 chunks of up to 512 KiB
		rep, err := Ask(ctx, nc, node, req)
		if err != nil {
			return nil, err
		}
		out = append(out, rep.Data...)
		if len(rep.Data) == 0 || rep.Offset == req.Offset {
			return out, nil
		}
		req.Offset = rep.Offset
	}
	return out, nil
}

// Messages turns CRI log lines ("<time> <stream> <F|P> <message>") into
// the plain text `kubectl logs` prints, joining partial lines.
func Messages(cri []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(cri, []byte{'\n'}) {
		f := bytes.SplitN(line, []byte{' '}, 4)
		if len(f) < 4 {
			continue
		}
		out.Write(f[3])
		if string(f[2]) != "P" {
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}
