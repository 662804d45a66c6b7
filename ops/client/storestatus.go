package client

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/podflow/podflow/raftstore"
)

// PrintStoreStatus writes what `podflow store status` shows: the leader's
// term and indexes, then one row per member of the leader's configuration
// (or, without a leader, the first answer's), with how far each is behind
// the leader; a replica that answered but is no member is listed last.
func PrintStoreStatus(out io.Writer, sts []*raftstore.Status) error {
	var leader *raftstore.Status
	for _, s := range sts {
		if s.State == "Leader" {
			leader = s
		}
	}
	if leader != nil {
		fmt.Fprintf(out, "leader %s  term %d  commit index %d  applied index %d  revision %d  compacted %d\n\n",
			leader.ID, leader.Term, leader.CommitIndex, leader.AppliedIndex, leader.Revision, leader.CompactRevision)
	} else {
		fmt.Fprintln(out, "no leader among the replicas that answered")
	}
	if len(sts) == 0 {
		return nil
	}
	seen := map[string]*raftstore.Status{}
	for _, s := range sts {
		seen[s.ID] = s
	}
	members := sts[0].Servers
	if leader != nil {
		members = leader.Servers
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tSUFFRAGE\tSTATE\tTERM\tLAST LOG\tCOMMIT\tAPPLIED\tBEHIND LEADER\tLAST CONTACT")
	for _, m := range members {
		s, ok := seen[m.ID]
		if !ok {
			fmt.Fprintf(tw, "%s\t%s\t%s\tunreachable\t\t\t\t\t\t\n", m.ID, m.Address, m.Suffrage)
			continue
		}
		delete(seen, m.ID)
		behind := "-"
		if leader != nil && leader.LastLogIndex >= s.LastLogIndex {
			behind = fmt.Sprint(leader.LastLogIndex - s.LastLogIndex)
		}
		contact := "never"
		if s.LastContact >= 0 {
			contact = s.LastContact.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", s.ID, s.Address, m.Suffrage, s.State, s.Term, s.LastLogIndex, s.CommitIndex, s.AppliedIndex, behind, contact)
	}
	for _, s := range seen {
		fmt.Fprintf(tw, "%s\t%s\tnot a member\t%s\t%d\t%d\t%d\t%d\t-\t-\n", s.ID, s.Address, s.State, s.Term, s.LastLogIndex, s.CommitIndex, s.AppliedIndex)
	}
	return tw.Flush()
}
