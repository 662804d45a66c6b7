module github.com/podflow/podflow/nodeagent

go 1.26.0

replace github.com/podflow/podflow/proto => ../proto

replace github.com/podflow/podflow/bus => ../bus

replace github.com/podflow/podflow/raftstore => ../raftstore

replace github.com/podflow/podflow/services => ../services
