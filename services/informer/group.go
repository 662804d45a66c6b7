package informer

import (
	"context"
	"errors"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/services/objects"
)

// Member is what a Group runs: any *Informer[T].
type Member interface {
	Run(ctx context.Context) error
	WaitForSync(ctx context.Context) error
}

var _ Member = (*Informer[objects.Object])(nil)

// Group is a stage's informers, started together. The zero value is an
// empty group. Add them before Start; Start once.
type Group struct {
	members []Member
}

// Add adds informers to the group.
func (g *Group) Add(ms ...Member) { g.members = append(g.members, ms...) }

// Start runs every informer of the group on eg until ctx is done (its
// cancellation is not an error of eg's), and returns once all have
// synced, or ctx's error if it ends first.
func (g *Group) Start(ctx context.Context, eg *errgroup.Group) error {
	for _, m := range g.members {
		eg.Go(func() error {
			if err := m.Run(ctx); !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		})
	}
	return g.WaitForSync(ctx)
}

// WaitForSync blocks until every informer of the group has synced or ctx
// is done.
func (g *Group) WaitForSync(ctx context.Context) error {
	for _, m := range g.members {
		if err := m.WaitForSync(ctx); err != nil {
			return err
		}
	}
	return nil
}
