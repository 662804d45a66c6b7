module github.com/podflow/podflow/bus

go 1.26

require github.com/podflow/podflow/proto v0.0.0

replace github.com/podflow/podflow/proto => ../proto
