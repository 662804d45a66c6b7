package roles

import (
	"context"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/pipeline"
)

// StoreReplica runs one raftstore replica of cfg, serving over nc, until
// ctx is done. Named writers (podflow's processes) read and write what
// their role may (services/pipeline); the admin's requests are unnamed.
func StoreReplica(ctx context.Context, cfg raftstore.Config, nc *nats.Conn, stderr io.Writer) error {
	cfg.Conn = nc
	cfg.WriteACL, cfg.ReadACL, cfg.ReadFilter = pipeline.StoreWriteACL, pipeline.StoreReadACL, pipeline.StoreReadFilter
	cfg.WriteFilter, cfg.ReplyACL = pipeline.StoreWriteFilter, pipeline.StoreReplyACL
	node, err := raftstore.NewNode(cfg)
	if err != nil {
		return err
	}
	if err := node.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "store replica %s serving %s.* (raft %s, data %s)\n", cfg.ID, cfg.Subject, node.RaftAddr(), cfg.DataDir)
	<-ctx.Done()
	return node.Shutdown()
}
