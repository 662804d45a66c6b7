module github.com/podflow/podflow/raftstore

go 1.26
