module github.com/podflow/podflow/bus

go 1.26
