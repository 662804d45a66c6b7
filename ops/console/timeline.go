package console

import (
	"sort"
	"time"

	"github.com/podflow/podflow/ops/processes/plan"
)

// TimelineLen is how many polls the pipeline's timeline keeps (about
// three minutes at one a second).
const TimelineLen = 180

// Point is the pipeline at one poll: its totals over every stage.
type Point struct {
	Time        time.Time `json:"time"`
	Pending     uint64    `json:"pending"`
	AckPending  int       `json:"ackPending"`
	Redelivered int       `json:"redelivered"`
}

// Mark is something that happened to a process between two polls: it was
// restarted (killed: what `podflow chaos` does), it stopped answering the
// ping (paused with SIGSTOP, or hung), or it answers again.
//
// The history's marks (History.Marks) come from the journals instead, at
// the time each thing happened: killed, exited, restarted, stopped (the
// supervisor's), paused, resumed, fault, healed (`podflow chaos`'s).
type Mark struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"` // restarted, silent, answering; or a plan.Happening kind
	Process string    `json:"process"`
	Detail  string    `json:"detail,omitempty"`
}

// timeline is the recent history the Snapshot carries.
type timeline struct {
	points []Point
	marks  []Mark
	kids   map[string]plan.Record
	pongs  map[string]bool
}

// add records one poll: the stages' totals, the supervisor's children and
// the replicas that answered.
func (tl *timeline) add(now time.Time, stages []Stage, kids []plan.Record, answered map[string]bool) {
	p := Point{Time: now}
	for _, s := range stages {
		p.Pending += s.Pending
		p.AckPending += s.AckPending
		p.Redelivered += s.Redelivered
	}
	tl.points = append(tl.points, p)
	if n := len(tl.points) - TimelineLen; n > 0 {
		tl.points = append([]Point{}, tl.points[n:]...)
	}
	var marks []Mark
	if kids != nil {
		cur := make(map[string]plan.Record, len(kids))
		for _, k := range kids {
			cur[k.Name] = k
			if old, ok := tl.kids[k.Name]; ok && (k.Restarts > old.Restarts || (k.PID != old.PID && old.PID != 0)) {
				at := now // when this poll saw it, unless the supervisor says when
				if !k.Started.IsZero() && k.Started.Before(now) {
					at = k.Started
				}
				marks = append(marks, Mark{Time: at, Kind: "restarted", Process: k.Name})
			}
		}
		tl.kids = cur
	}
	if tl.pongs != nil {
		for name := range tl.pongs {
			if !answered[name] {
				marks = append(marks, Mark{Time: now, Kind: "silent", Process: name})
			}
		}
		for name := range answered {
			if !tl.pongs[name] {
				marks = append(marks, Mark{Time: now, Kind: "answering", Process: name})
			}
		}
	}
	tl.pongs = answered
	sort.Slice(marks, func(i, j int) bool { return marks[i].Kind+marks[i].Process < marks[j].Kind+marks[j].Process })
	tl.marks = append(tl.marks, marks...)
	if len(tl.points) > 0 {
		oldest := tl.points[0].Time
		i := 0
		for i < len(tl.marks) && tl.marks[i].Time.Before(oldest) {
			i++
		}
		tl.marks = tl.marks[i:]
	}
}
