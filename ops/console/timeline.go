package console

import (
	"sort"
	"time"
)

// MarksKeep is how long the snapshot keeps the polls' marks.
const MarksKeep = 15 * time.Minute

// maxMarks bounds the polls' marks the snapshot carries.
const maxMarks = 200

// Mark is something that happened to a process. The history's marks
// (History.Marks) come from the journals, at the time each thing
// happened: killed, exited, restarted, stopped (the supervisor's), paused,
// resumed, fault, healed (`podflow chaos`'s). The snapshot's come from
// the polls, which ping every replica: silent (it stopped answering —
// paused, or hung) and answering (it answers again), at the poll that
// saw it.
type Mark struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Process string    `json:"process"`
	Detail  string    `json:"detail,omitempty"`
}

// pings follows which replicas answer the polls' ping.
type pings struct {
	marks []Mark
	pongs map[string]bool
}

// add records one poll's answers: a mark for each replica that stopped
// or resumed answering since the last.
func (p *pings) add(now time.Time, answered map[string]bool) {
	var marks []Mark
	if p.pongs != nil {
		for name := range p.pongs {
			if !answered[name] {
				marks = append(marks, Mark{Time: now, Kind: "silent", Process: name})
			}
		}
		for name := range answered {
			if !p.pongs[name] {
				marks = append(marks, Mark{Time: now, Kind: "answering", Process: name})
			}
		}
	}
	p.pongs = answered
	sort.Slice(marks, func(i, j int) bool { return marks[i].Kind+marks[i].Process < marks[j].Kind+marks[j].Process })
	p.marks = append(p.marks, marks...)
	i := 0
	for i < len(p.marks) && (p.marks[i].Time.Before(now.Add(-MarksKeep)) || len(p.marks)-i > maxMarks) {
		i++
	}
	if i > 0 {
		p.marks = append([]Mark{}, p.marks[i:]...)
	}
}
