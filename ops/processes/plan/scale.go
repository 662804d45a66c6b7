package plan

import (
	"fmt"
	"strings"

	"github.com/podflow/podflow/services/pipeline"
)

// ScaleRequest asks a running `podflow up` for n replicas of a stage.
type ScaleRequest struct {
	Stage    string `json:"stage"`
	Replicas int    `json:"replicas"`
}

// ScaleResponse is up's answer: the stage's replicas after the change.
type ScaleResponse struct {
	OK       bool     `json:"ok"`
	Message  string   `json:"message"`
	Replicas []string `json:"replicas"`
}

// ScaleSubject is where `podflow up` takes `podflow scale` requests.
const ScaleSubject = "podflow.ops.up.scale"

// Validate checks a request against the plan's stages.
func (r ScaleRequest) Validate() error {
	if !pipeline.Known(r.Stage) || r.Replicas < 0 || r.Replicas > MaxReplicas {
		return fmt.Errorf("cannot scale %q to %d: stages are %s, replicas 0..%d", r.Stage, r.Replicas, strings.Join(pipeline.Stages, ", "), MaxReplicas)
	}
	return nil
}

// ScaleDiff returns the replica indexes to start and to stop so that a
// stage running replicas have (1-based indexes) runs want: new replicas
// fill the lowest free indexes, the highest are stopped first.
func ScaleDiff(have []int, want int) (start, stop []int) {
	set := map[int]bool{}
	maxIdx := 0
	for _, i := range have {
		set[i] = true
		maxIdx = max(maxIdx, i)
	}
	n := len(set)
	for i := 1; n < want; i++ {
		if !set[i] {
			start = append(start, i)
			n++
		}
	}
	for i := maxIdx; n > want && i > 0; i-- {
		if set[i] {
			stop = append(stop, i)
			n--
		}
	}
	return start, stop
}

// StageIndex parses the replica index of a stage process's name
// ("scheduler-2" → 2), 0 when it has none.
func StageIndex(stage, name string) int {
	var i int
	fmt.Sscanf(strings.TrimPrefix(name, stage+"-"), "%d", &i)
	return i
}

// StageName is the process name of replica i of stage.
func StageName(stage string, i int) string { return fmt.Sprintf("%s-%d", stage, i) }

// Scale changes stage's replicas in the plan to req.Replicas, given the
// indexes of the replicas running now: it returns the processes to start
// and the names of those to stop.
func (p *Plan) Scale(req ScaleRequest, have []int) (start []Process, stop []string, err error) {
	if err := req.Validate(); err != nil {
		return nil, nil, err
	}
	up, down := ScaleDiff(have, req.Replicas)
	for _, i := range up {
		sp, err := p.StageProcess(req.Stage, i)
		if err != nil {
			return nil, nil, err
		}
		start = append(start, sp)
	}
	gone := map[string]bool{}
	for _, i := range down {
		stop = append(stop, StageName(req.Stage, i))
		gone[StageName(req.Stage, i)] = true
	}
	for si, s := range p.Steps {
		if s.Kind != StageKind {
			continue
		}
		var kept []Process
		for _, pr := range s.Processes {
			if !(pr.Stage == req.Stage && gone[pr.Name]) {
				kept = append(kept, pr)
			}
		}
		p.Steps[si].Processes = append(kept, start...)
	}
	if p.Options.Replicas == nil {
		p.Options.Replicas = map[string]int{}
	}
	p.Options.Replicas[req.Stage] = req.Replicas
	return start, stop, nil
}
