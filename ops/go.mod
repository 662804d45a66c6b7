module github.com/podflow/podflow/ops

go 1.26
