//go:build !linux

package nemesis

import (
	"errors"
	"net"
	"time"
)

// LossyPath needs Linux (network namespaces, nftables).
type LossyPath struct{}

// NewLossyPath fails off Linux.
func NewLossyPath([]string) (*LossyPath, error) {
	return nil, errors.New("nemesis: packet loss needs Linux")
}

func (*LossyPath) Dial(string, time.Duration) (net.Conn, error) {
	return nil, errors.New("nemesis: no lossy path")
}
func (*LossyPath) SetLoss(int) error { return errors.New("nemesis: no lossy path") }
func (*LossyPath) Close() error      { return nil }
