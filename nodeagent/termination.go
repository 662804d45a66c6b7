package nodeagent

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	corev1 "github.com/podflow/podflow/proto/corev1"
)

// Termination messages, as kubelet makes them: when a container instance
// exits, the last MaxContainerTerminationMessageLength bytes of the file
// it wrote at its terminationMessagePath become
// state.terminated.message (after the runtime's own message and ": ").
// With terminationMessagePolicy FallbackToLogsOnError, a container that
// failed (exit code not 0) and left that file empty or absent gets the
// end of its log instead: its last MaxContainerTerminationMessageLogLines
// lines, at most MaxContainerTerminationMessageLogLength bytes. In the
// pod's status each message is cut to MaxPodTerminationMessageLength
// divided among the pod's containers (kubelet's status manager,
// normalizeStatus). Messages are kept valid UTF-8 (what JSON encoding
// would make of them): a rune cut by a limit is dropped, other invalid
// bytes become U+FFFD.

// Kubelet's limits (pkg/kubelet/container) and the API's defaults.
const (
	MaxContainerTerminationMessageLength    = 4 * 1024
	MaxContainerTerminationMessageLogLength = 2 * 1024
	MaxContainerTerminationMessageLogLines  = 80
	MaxPodTerminationMessageLength          = 12 * 1024

	DefaultTerminationMessagePath = "/dev/termination-log"
	TerminationMessageFallback    = "FallbackToLogsOnError"
)

// TerminationMessagePath is c's terminationMessagePath, defaulted as the
// API server defaults it.
func TerminationMessagePath(c *corev1.Container) string {
	if p := c.GetTerminationMessagePath(); p != "" {
		return p
	}
	return DefaultTerminationMessagePath
}

// terminationMessage is the message of c's exit ex: the runtime's, and
// what c left, as kubelet's convertToKubeContainerStatus composes them.
func (w *worker) terminationMessage(ctx context.Context, c *ctr, ex ContainerExit) string {
	msg := ex.Message
	r, ok := w.d.rt.(TerminationMessageReader)
	if !ok || c.id == "" {
		return msg
	}
	// A container that could not even start has no logs to fall back to.
	fallback := c.spec.GetTerminationMessagePolicy() == TerminationMessageFallback &&
		ex.ExitCode != 0 && ex.Reason != "ContainerCannotRun"
	var left string
	data, found, err := r.TerminationMessage(ctx, w.uid, c.id, MaxContainerTerminationMessageLength)
	switch {
	case err != nil:
		left = fmt.Sprintf("Error on reading termination log %s: %v", TerminationMessagePath(c.spec), err)
	case found && len(data) > 0:
		left = tailUTF8(data, MaxContainerTerminationMessageLength)
	case fallback:
		logs, err := r.LogTail(ctx, w.uid, c.id, MaxContainerTerminationMessageLogLines, MaxContainerTerminationMessageLogLength)
		if err != nil {
			left = fmt.Sprintf("Error on reading termination message from logs: %v", err)
		} else {
			left = tailUTF8(logs, MaxContainerTerminationMessageLogLength)
		}
	}
	if left != "" {
		if msg != "" {
			msg += ": "
		}
		msg += left
	}
	return msg
}

// tailUTF8 returns the last max bytes of b as valid UTF-8: a rune cut at
// the start is dropped, invalid bytes become U+FFFD, and the result is
// again cut to max bytes.
func tailUTF8(b []byte, max int) string {
	if len(b) > max {
		b = b[len(b)-max:]
	}
	for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
		b = b[1:]
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	for len(s) > max {
		_, n := utf8.DecodeRuneInString(s)
		s = s[n:]
	}
	return s
}

// headUTF8 returns the first max bytes of s, without a rune cut at the
// end (s is valid UTF-8).
func headUTF8(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[:max]
	for len(s) > 0 {
		r, n := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || n != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// podMessageBudget is what each container's termination message may take
// of the pod's status, as kubelet's normalizeStatus divides it.
func (w *worker) podMessageBudget() int {
	n := len(w.inits) + len(w.apps)
	if n == 0 {
		return MaxPodTerminationMessageLength
	}
	return MaxPodTerminationMessageLength / n
}
