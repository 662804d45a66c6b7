// Package nodelogs is the wire form of container logs served by Linux node
// agents over NATS request-reply on podflow.ops.logs.<node>: what
// `podflow logs` and the Kubernetes API's pods/log read.
//
// A log travels in chunks: each request asks for the next at most
// ChunkBytes of whole CRI lines from an offset, so a message is bounded,
// the reader sets the pace (one chunk in flight: the flow control) and
// an empty chunk of an instance that no longer runs is the end. A Stream
// reads them one at a time, turning each into the text kubectl prints;
// what it holds is one chunk, whatever the log's size.
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
	// File is Reply.File of the last chunk ("" at first: the read starts
	// at the last TailLines lines, nil for all, written at or after
	// SinceTime, Unix ns, 0 for any).
	File      string `json:"file,omitempty"`
	TailLines *int64 `json:"tailLines,omitempty"`
	SinceTime int64  `json:"sinceTime,omitempty"`
}

// ChunkBytes bounds the data of one Reply.
const ChunkBytes = 64 << 10

// Reply is a chunk of a CRI-format log (whole lines) and where the next
// read starts; Error is set when the node could not serve it, with
// Reason its class.
type Reply struct {
	Container string `json:"container"`
	Data      []byte `json:"data"`
	Offset    int64  `json:"offset"`
	File      string `json:"file,omitempty"`
	Running   bool   `json:"running"`
	Error     string `json:"error,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// ErrNode is returned when the node answered with an error.
var ErrNode = errors.New("nodelogs: the node could not serve the log")

// Reasons of a node's refusal (Error.Reason), as kubelet's server answers
// a log request: ReasonBadRequest for a container with no log to read
// ("container "x" in pod "y" is waiting to start: ContainerCreating",
// HTTP 400, which the apiserver relays as a BadRequest), ReasonNotFound
// for a pod or container the node does not know (404).
const (
	ReasonBadRequest = "BadRequest"
	ReasonNotFound   = "NotFound"
)

// Error is a node's refusal of a log request: the words the user sees
// and their class. It matches ErrNode.
type Error struct {
	Reason  string // ReasonBadRequest, ReasonNotFound, or "" (another failure)
	Message string
}

func (e *Error) Error() string { return ErrNode.Error() + ": " + e.Message }

// Is makes an *Error match ErrNode.
func (e *Error) Is(target error) bool { return target == ErrNode }

// Ask makes one log request to node's agent.
func Ask(ctx context.Context, nc *nats.Conn, node string, req Request) (Reply, error) {
	var rep Reply
	b, err := json.Marshal(req)
	if err != nil {
		return rep, err
	}
	msg, err := pipeline.AskNode(ctx, nc, Subject(node), node, b)
	if err != nil {
		return rep, fmt.Errorf("nodelogs: ask node %q: %w", node, err)
	}
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return rep, fmt.Errorf("nodelogs: decode: %w", err)
	}
	if rep.Error != "" {
		return rep, &Error{Reason: rep.Reason, Message: rep.Error}
	}
	return rep, nil
}

// Messages turns CRI log lines ("<time> <stream> <F|P> <message>") into
// the plain text `kubectl logs` prints, joining partial lines.
func Messages(cri []byte) []byte { return render(cri, false) }

// render is Messages, with timestamps each record's time in front (as
// kubelet writes with timestamps=true).
func render(cri []byte, timestamps bool) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(cri, []byte{'\n'}) {
		f := bytes.SplitN(line, []byte{' '}, 4)
		if len(f) < 4 {
			continue
		}
		if timestamps {
			out.Write(f[0])
			out.WriteByte(' ')
		}
		out.Write(f[3])
		if string(f[2]) != "P" {
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}
